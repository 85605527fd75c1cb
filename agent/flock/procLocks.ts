import * as fs from 'node:fs';

/** A flock(2) lock the kernel lists in /proc/locks. */
export interface KernelLock {
  pid: number;
  dev: number;
  ino: number;
}

/**
 * The FLOCK locks held on the machine, keyed by `dev:ino`. Reading /proc/locks tells whether a slot
 * is taken without touching it: a trial lock would make a concurrent acquirer think the slot busy.
 * The PID listed is the process that took the lock, which for a handed-over descriptor may have
 * exited since; the owner record names the real holder.
 */
export function readKernelFlocks(): Map<string, KernelLock> {
  const locks = new Map<string, KernelLock>();
  let text: string;
  try {
    text = fs.readFileSync('/proc/locks', 'utf8');
  } catch {
    return locks;
  }
  for (const line of text.split('\n')) {
    // "1: FLOCK  ADVISORY  WRITE 1234 00:2c:5678 0 EOF"; blocked waiters are marked "->" and skipped.
    const m = /^\d+:\s+FLOCK\s+\S+\s+\S+\s+(-?\d+)\s+([0-9a-f]+):([0-9a-f]+):(\d+)\s/.exec(line);
    if (!m) continue;
    const major = parseInt(m[2], 16);
    const minor = parseInt(m[3], 16);
    const lock: KernelLock = { pid: Number(m[1]), dev: makedev(major, minor), ino: Number(m[4]) };
    locks.set(`${lock.dev}:${lock.ino}`, lock);
  }
  return locks;
}

/** glibc's makedev, so the numbers compare with fs.Stats.dev. */
function makedev(major: number, minor: number): number {
  return ((major & 0xfff) << 8) | (minor & 0xff) | ((minor & ~0xff) << 12) | (Math.floor(major / 0x1000) * 2 ** 32);
}

/** The kernel's lock table, read on first use only. */
export type KernelLocks = () => Map<string, KernelLock>;

/**
 * A table read at most once, and only if asked. A read of /proc/locks takes the write side of the
 * kernel's lock-table semaphore (an RCU grace period) and holds back every flock(2) on the machine
 * meanwhile: 15 us on an idle machine, 5.6 ms on average during a burst of runs, where a picture
 * of the pools read it some thirty times a second. Pictures whose slots are all this agent's skip it.
 */
export function lazyKernelFlocks(): KernelLocks {
  let table: Map<string, KernelLock> | null = null;
  return () => (table ??= readKernelFlocks());
}

/** The kernel's lock on a file (by its identity, from lstat or fstat: never through a link). */
export function kernelLockOf(locks: Map<string, KernelLock>, st: { dev: number; ino: number } | null): KernelLock | null {
  return st ? (locks.get(`${st.dev}:${st.ino}`) ?? null) : null;
}
