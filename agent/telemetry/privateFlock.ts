import * as fs from 'node:fs';
import { flockSync } from 'fs-ext';
import { openExclusiveFlock } from '../flock/openExclusiveFlock';
import { checkOwnFile, UnsafeFileError } from './sqliteFileGuard';

const POLL_MS = 20;

/**
 * An flock(2) on a private file of ours that processes of one home take in turn (the flusher's batch,
 * the adoption of runs left by a process that is gone). The kernel drops it the instant its holder
 * dies, so a crash never leaves it taken.
 */
export class PrivateFlock {
  protected constructor(private fd: number | null) {}

  /** Takes the lock without waiting; null when another process holds it. */
  static tryAcquire(lockPath: string): PrivateFlock | null {
    // Never through a link, never blocking on a FIFO planted here, created private.
    const { O_WRONLY, O_APPEND, O_CREAT, O_NOFOLLOW, O_NONBLOCK } = fs.constants;
    let fd: number | null;
    try {
      fd = openExclusiveFlock(lockPath, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK, 0o600);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ELOOP') throw new UnsafeFileError(`${lockPath} is a symbolic link: refused; remove it`);
      throw err;
    }
    if (fd === null) return null;
    try {
      checkOwnFile(fd, lockPath);
    } catch (err) {
      fs.closeSync(fd);
      throw err;
    }
    return new PrivateFlock(fd);
  }

  /** Tries every POLL_MS up to `waitMs` (0: one try), off the event loop's way; null when it stayed taken. */
  static async acquire(lockPath: string, waitMs: number, stop: () => boolean = () => false): Promise<PrivateFlock | null> {
    const deadline = Date.now() + waitMs;
    for (;;) {
      const lock = PrivateFlock.tryAcquire(lockPath);
      if (lock !== null || Date.now() >= deadline || stop()) return lock;
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  }

  release(): void {
    if (this.fd === null) return;
    const fd = this.fd;
    this.fd = null;
    // Closing the descriptor releases the flock too; unlocking first makes the order explicit.
    try {
      flockSync(fd, 'un');
    } finally {
      fs.closeSync(fd);
    }
  }
}
