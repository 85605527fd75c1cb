/**
 * Whether an error of the GitHub store means its storage is gone for now (the database restarting or
 * unreachable, its disk full, the SQLite file unwritable) rather than a fault of the statement: such a
 * sync waits for its storage and resumes from its checkpoints instead of failing. Anything else
 * (a constraint, a syntax error: a bug) stays `storage-error`.
 */
export type StorageLossCause = 'unreachable' | 'disk-full';

// PostgreSQL SQLSTATE classes and codes of a server that is away or out of room:
// 08 connection exception, 53 insufficient resources (53100 disk_full), 57P01-57P03 shutdown,
// crash, cannot connect now, 58 system error (58030 io_error).
const PG_TRANSIENT = /^(08|53|58)|^57P0[1-3]$/;
// The node side of a connection that is gone: refused, reset, timed out, closed under the query.
const NET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN']);
const PG_MESSAGES = [
  'Connection terminated',
  'connection error and is not queryable',
  'timeout exceeded when trying to connect',
  'Query read timeout',
  'the database system is',
];
// better-sqlite3's codes for a file it cannot write for now; the fs codes of the file's directory.
const SQLITE_TRANSIENT = /^SQLITE_(FULL|IOERR|BUSY|LOCKED|CANTOPEN|READONLY|PROTOCOL)/;
const FULL_CODES = new Set(['ENOSPC', 'EDQUOT', 'SQLITE_FULL', '53100']);
const FS_CODES = new Set(['ENOSPC', 'EDQUOT', 'EIO', 'EROFS']);

/** The cause when `err` is a loss of the storage, else null. */
export function storageLossCause(err: unknown): StorageLossCause | null {
  if (!(err instanceof Error)) return null;
  if (err instanceof AggregateError) {
    for (const inner of err.errors) {
      const cause = storageLossCause(inner);
      if (cause !== null) return cause;
    }
  }
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (FULL_CODES.has(code) || code.startsWith('SQLITE_FULL')) return 'disk-full';
    if (PG_TRANSIENT.test(code) || NET_CODES.has(code) || SQLITE_TRANSIENT.test(code) || FS_CODES.has(code)) return 'unreachable';
  }
  if (/database or disk is full|No space left on device/i.test(err.message)) return 'disk-full';
  if (PG_MESSAGES.some((m) => err.message.includes(m))) return 'unreachable';
  return err.cause !== undefined && err.cause !== err ? storageLossCause(err.cause) : null;
}

export function isStorageLost(err: unknown): boolean {
  return storageLossCause(err) !== null;
}

/**
 * The outcome handler of a stage's tasks, guarded: a loss of the storage in it (writing a stage's
 * mark, the progress) is handed to `onLost` instead of ending the stage with an error, so that the
 * leg stops starting repositories and ends `storage-lost` with every checkpoint as it was.
 */
export function keepStorageLoss<A extends unknown[]>(
  handler: (...args: A) => Promise<void>,
  onLost: (err: Error) => void,
): (...args: A) => Promise<void> {
  return async (...args) => {
    try {
      await handler(...args);
    } catch (err) {
      if (!isStorageLost(err)) throw err;
      onLost(err as Error);
    }
  };
}
