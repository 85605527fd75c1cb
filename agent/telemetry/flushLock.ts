import { PrivateFlock } from './privateFlock';

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
export const FlushLock = {
  tryAcquire: (lockPath: string): PrivateFlock | null => PrivateFlock.tryAcquire(lockPath),
  pathFor: (spoolPath: string): string => `${spoolPath}.flush-lock`,
};
