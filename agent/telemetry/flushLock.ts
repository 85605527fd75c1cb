import * as fs from 'node:fs';
import { flockSync } from 'fs-ext';
import { openExclusiveFlock } from '../flock/openExclusiveFlock';
import { checkOwnFile, UnsafeFileError } from './sqliteFileGuard';

/**
 * One flusher per spool across processes: an flock(2) on `<spool>.flush-lock`, held from reading a batch
 * until its rows are deleted from the spool.
 *
 * Why flock and not the alternatives: a PostgreSQL advisory lock guards the database, not the spool
 * file, and a transaction-scoped one is released at COMMIT, before the SQLite delete, so a second
 * flusher could read and send the same batch again; a session lock is lost with its connection, even
 * while the process goes on to delete. proper-lockfile's lock outlives a kill -9 until it goes stale
 * (seconds later). The kernel drops an flock the instant its holder dies, and it is about the file
 * that actually holds the batch. Idempotency by event id remains the safety net.
 */
export class FlushLock {
  private constructor(private fd: number | null) {}

  /** Takes the lock without waiting; null when another process holds it. */
  static tryAcquire(lockPath: string): FlushLock | null {
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
    return new FlushLock(fd);
  }

  static pathFor(spoolPath: string): string {
    return `${spoolPath}.flush-lock`;
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
