import * as fs from 'node:fs';
import * as path from 'node:path';
import type { SlotHolder, SlotState } from '../../shared/protocol';
import type { Logger } from '../log/logger';
import { RunRefusedError } from '../runs/startGate';
import { parseOwnerRecord, type OwnerRecord } from './ownerRecord';
import { childrenOf, isStopped, readProcInfo } from './procInfo';
import { kernelLockOf, readKernelFlocks, type KernelLock } from './procLocks';
import { SlotLock, tryLockSlot } from './slotLock';

export interface SlotGrant {
  lock: SlotLock;
  index: number;
}

/** A stopped holder the pool killed to take its slot back (seed 000, section 6). */
export interface ReclaimEvent {
  pool: string;
  index: number;
  lockPath: string;
  record: OwnerRecord;
  killedGroup: number | null;
}

export interface SlotPoolOptions {
  name: string;
  dir: string;
  size: number;
  waitTimeoutSeconds: number;
  /** File name of slot N; the serial mode uses the one legacy lock file. */
  fileName?: (index: number) => string;
  /** How often waiters retry while the holders are other processes (their release sends no signal). */
  pollMs?: number;
  logger: Logger;
  onReclaim(event: ReclaimEvent): void;
}

interface Waiter {
  id: string;
  resolve(grant: SlotGrant): void;
  reject(err: Error): void;
  onPosition(position: number): void;
  cleanup(): void;
}

const SLOT_FILE = /^slot_(\d+)\.lock$/;

/**
 * One pool of slots. Waiters are served first come, first served; a slot is a flock on
 * `<dir>/slot_<N>.lock`, so agents, CLI runs and shell scripts on the same files share the pool.
 */
export class SlotPool {
  readonly name: string;
  readonly size: number;
  readonly waitTimeoutSeconds: number;
  private readonly waiters: Waiter[] = [];
  private pollTimer: NodeJS.Timeout | null = null;
  private readonly fileName: (index: number) => string;

  constructor(private readonly opts: SlotPoolOptions) {
    this.name = opts.name;
    this.size = opts.size;
    this.waitTimeoutSeconds = opts.waitTimeoutSeconds;
    this.fileName = opts.fileName ?? ((i) => `slot_${i}.lock`);
    fs.mkdirSync(opts.dir, { recursive: true });
  }

  lockPath(index: number): string {
    return path.join(this.opts.dir, this.fileName(index));
  }

  /**
   * Resolves with a held slot, in arrival order. Rejects with RunRefusedError('wait-timeout') after
   * the pool's wait timeout, or with the signal's reason when it aborts; either way the place is freed.
   */
  acquire(id: string, signal: AbortSignal, onPosition: (position: number) => void = () => {}): Promise<SlotGrant> {
    return new Promise<SlotGrant>((resolve, reject) => {
      if (signal.aborted) {
        reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
        return;
      }
      const timer = setTimeout(() => {
        this.remove(waiter);
        reject(new RunRefusedError('wait-timeout', `no ${this.name} slot became free within ${this.waitTimeoutSeconds} s`));
      }, this.waitTimeoutSeconds * 1000);
      timer.unref();
      const onAbort = () => {
        this.remove(waiter);
        reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
      };
      signal.addEventListener('abort', onAbort, { once: true });
      const waiter: Waiter = {
        id,
        resolve,
        reject,
        onPosition,
        cleanup: () => {
          clearTimeout(timer);
          signal.removeEventListener('abort', onAbort);
        },
      };
      this.waiters.push(waiter);
      this.pump();
      // Only a run that is still queued after the pump has a position to report.
      const position = this.waiters.indexOf(waiter);
      if (position >= 0) onPosition(position + 1);
    });
  }

  /** A run of this process released its slot: serve the next waiter now rather than at the next poll. */
  released(): void {
    this.pump();
  }

  close(): void {
    if (this.pollTimer) clearTimeout(this.pollTimer);
    this.pollTimer = null;
  }

  private remove(waiter: Waiter): void {
    const at = this.waiters.indexOf(waiter);
    if (at >= 0) this.waiters.splice(at, 1);
    waiter.cleanup();
    this.reportPositions(at);
  }

  private pump(): void {
    let served = 0;
    while (this.waiters.length > 0) {
      const grant = this.tryTakeAny();
      if (!grant) break;
      const waiter = this.waiters.shift()!;
      waiter.cleanup();
      waiter.resolve(grant);
      served += 1;
    }
    if (served > 0) this.reportPositions(0);
    if (this.waiters.length > 0 && !this.pollTimer) {
      this.pollTimer = setTimeout(() => {
        this.pollTimer = null;
        this.pump();
      }, this.opts.pollMs ?? 50);
      this.pollTimer.unref();
    }
  }

  private reportPositions(from: number): void {
    for (let i = Math.max(0, from); i < this.waiters.length; i++) this.waiters[i].onPosition(i + 1);
  }

  private tryTakeAny(): SlotGrant | null {
    // A pool shrunk while higher-numbered slots are held: those holders still count against it.
    const beyond = this.heldBeyondSize();
    if (beyond >= this.size) return null;
    const busy: number[] = [];
    for (let index = 0; index < this.size; index++) {
      const lock = tryLockSlot(this.lockPath(index));
      if (!lock) {
        busy.push(index);
        continue;
      }
      if (beyond > 0 && this.heldWithin(index) + beyond >= this.size) {
        lock.closeOwnCopy();
        return null;
      }
      return { lock, index };
    }
    for (const index of busy) this.reclaimIfStopped(index);
    return null;
  }

  /** Held slots below the size, other than `except`. */
  private heldWithin(except: number): number {
    const locks = readKernelFlocks();
    let held = 0;
    for (let i = 0; i < this.size; i++) if (i !== except && kernelLockOf(locks, this.lockPath(i))) held += 1;
    return held;
  }

  private heldBeyondSize(): number {
    if (this.opts.fileName) return 0;
    let names: string[];
    try {
      names = fs.readdirSync(this.opts.dir);
    } catch {
      return 0;
    }
    const beyond = names.filter((n) => Number(SLOT_FILE.exec(n)?.[1] ?? -1) >= this.size);
    if (beyond.length === 0) return 0;
    const locks = readKernelFlocks();
    return beyond.filter((n) => kernelLockOf(locks, path.join(this.opts.dir, n)) !== null).length;
  }

  /**
   * A holder in state T keeps its slot forever while doing nothing: kill its group and let the next
   * try take the slot. Only a holder whose PID and start time both match the record is touched, so a
   * reused PID is never signalled.
   */
  private reclaimIfStopped(index: number): void {
    const lockPath = this.lockPath(index);
    const record = readRecord(lockPath);
    if (!record) return;
    const info = readProcInfo(record.pid);
    if (!info || info.startTime !== record.startTime) return;
    const stopped = isStopped(info) || childrenOf(info.pid).some((child) => {
      const c = readProcInfo(child);
      return c !== null && isStopped(c);
    });
    if (!stopped) return;
    // Our runs lead their own process group; anything else is killed alone, never its group.
    const group = info.pgid === info.pid ? info.pid : null;
    try {
      process.kill(group !== null ? -group : info.pid, 'SIGKILL');
    } catch (err) {
      this.opts.logger.warn({ err, pool: this.name, index, pid: info.pid }, 'could not kill a stopped slot holder');
      return;
    }
    this.opts.logger.warn({ pool: this.name, index, pid: info.pid, fetcher: record.fetcher, runId: record.runId }, 'reclaimed a slot from a stopped holder');
    this.opts.onReclaim({ pool: this.name, index, lockPath, record, killedGroup: group });
  }

  /**
   * What each slot's lock file says now, checked against the kernel's lock table (read once by the
   * caller for all pools) and /proc.
   */
  state(isOwnRun: (runId: string) => boolean, locks: Map<string, KernelLock> = readKernelFlocks()): SlotState[] {
    const count = Math.max(this.size, this.highestFileIndex() + 1);
    const slots: SlotState[] = [];
    for (let index = 0; index < count; index++) {
      const lockPath = this.lockPath(index);
      const kernelLock = kernelLockOf(locks, lockPath);
      let holder: SlotHolder | null = null;
      if (kernelLock) {
        const record = readRecord(lockPath);
        const info = record ? readProcInfo(record.pid) : null;
        if (record && info && info.startTime === record.startTime) {
          holder = { pid: record.pid, runId: record.runId, fetcher: record.fetcher, since: record.since, foreign: !(record.runId && isOwnRun(record.runId)) };
        } else {
          holder = { pid: kernelLock.pid, runId: null, fetcher: null, since: null, foreign: true };
        }
      }
      slots.push({ pool: this.name, index, lockPath, holder });
    }
    return slots;
  }

  private highestFileIndex(): number {
    if (this.opts.fileName) return 0;
    try {
      return Math.max(-1, ...fs.readdirSync(this.opts.dir).map((n) => Number(SLOT_FILE.exec(n)?.[1] ?? -1)));
    } catch {
      return -1;
    }
  }
}

function readRecord(lockPath: string): OwnerRecord | null {
  try {
    return parseOwnerRecord(fs.readFileSync(lockPath, 'utf8'));
  } catch {
    return null;
  }
}
