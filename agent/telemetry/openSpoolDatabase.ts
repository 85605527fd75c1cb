import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Logger } from '../log/logger';
import { dropEarlierRunSchema } from './dropEarlierRunSchema';
import { ensurePrivateDir } from './privateDir';
import { RUN_TOTALS_SEEDED, SEED_RUN_TOTALS, SPOOL_RUN_TOTALS } from './runTotalsSql';
import { SELECT_META, SPOOL_RUN_INDEXES, SPOOL_SCHEMA, SPOOL_SCHEMA_VERSION } from './spoolSql';
import { guardSqliteFiles, tightenSqliteFiles } from './sqliteFileGuard';

export interface OpenedSpool {
  db: Database.Database;
  path: string;
  fallback: boolean;
}

export interface OpenSpoolResult {
  opened: OpenedSpool | null;
  /** What went wrong on the way (unwritable path, corrupt file moved aside); null when nothing did. */
  error: string | null;
}

/** How long an open waits for other processes (a burst of cron CLIs) before it gives up. */
const OPEN_BUSY_WAIT_MS = 120_000;
const CORRUPT_CODES = new Set(['SQLITE_NOTADB', 'SQLITE_CORRUPT']);

/** A spool file that exists but is not a usable SQLite database. */
export class CorruptSpoolError extends Error {}

export function isCorruptionError(err: unknown): boolean {
  if (err instanceof CorruptSpoolError) return true;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && [...CORRUPT_CODES].some((c) => code.startsWith(c));
}

/**
 * Opens the spool at `primary`, else at `fallbackPath` (in a private per-user folder, verified first),
 * moving a corrupt file aside and starting a new one in its place. Returns no database, never throws,
 * when neither path can be written: the caller then keeps or counts what it cannot store.
 */
export function openSpoolDatabase(
  primary: string,
  fallbackPath: string,
  logger: Logger,
  now: () => Date,
  which: 'both' | 'primary' | 'fallback' | 'none' = 'both',
  busyWaitMs = OPEN_BUSY_WAIT_MS,
): OpenSpoolResult {
  const problems: string[] = [];
  const candidates = (
    [
      [primary, false],
      [fallbackPath, true],
    ] as const
  ).filter(([, fallback]) => which === 'both' || (which === 'fallback' && fallback) || (which === 'primary' && !fallback));
  for (const [file, fallback] of candidates) {
    if (fallback && path.resolve(file) === path.resolve(primary)) continue;
    try {
      // The fallback folder is shared ground (/tmp): it must be ours alone before anything goes in.
      if (fallback) ensurePrivateDir(path.dirname(file));
      return {
        opened: { db: openWithRecovery(file, logger, now, problems, busyWaitMs), path: file, fallback },
        error: problems.length > 0 ? problems.join('; ') : null,
      };
    } catch (err) {
      const message = `telemetry spool ${file} cannot be written: ${errorText(err)}`;
      problems.push(message);
      logger[fallback ? 'error' : 'warn']({ path: file, err: errorText(err) }, message);
      // Busy is other writers at work, not a file that cannot be written: wait for it (the caller
      // holds events meanwhile), never leave events in a fallback only because of a burst.
      if (!fallback && isBusyError(err)) break;
    }
  }
  return { opened: null, error: problems.join('; ') };
}

function openWithRecovery(file: string, logger: Logger, now: () => Date, problems: string[], busyWaitMs: number): Database.Database {
  try {
    return openAt(file, busyWaitMs);
  } catch (err) {
    if (!isCorruptionError(err)) throw err;
    const aside = moveAside(file, now());
    const message = `telemetry spool ${file} is corrupt (${errorText(err)}); moved aside to ${aside} and started a new one`;
    problems.push(message);
    logger.error({ path: file, movedTo: aside, err: errorText(err) }, message);
    return openAt(file, busyWaitMs);
  }
}

export function openAt(file: string, busyWaitMs = OPEN_BUSY_WAIT_MS): Database.Database {
  fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  guardSqliteFiles(file);
  return retryWhileBusy(() => configure(file), busyWaitMs);
}

/**
 * Calls `open` again, with a jittered backoff, while SQLite says the file is busy: busy means other
 * processes (a burst of CLI runs) are writing, so wait for them, never fall back (nothing would flush
 * a fallback written for that reason). Any other error, or still busy after `waitMs`, is thrown.
 */
export function retryWhileBusy<T>(open: () => T, waitMs: number): T {
  const deadline = Date.now() + waitMs;
  for (let attempt = 0; ; attempt += 1) {
    try {
      return open();
    } catch (err) {
      if (!isBusyError(err) || Date.now() >= deadline) throw err;
      sleepSync(Math.min(200, 5 * 2 ** Math.min(attempt, 6)) * (0.5 + Math.random()));
    }
  }
}

function configure(file: string): Database.Database {
  const db = new Database(file);
  try {
    // busy_timeout FIRST: switching to WAL needs a lock, and without a busy handler a burst of
    // processes opening the spool together gets SQLITE_BUSY at once instead of waiting its turn.
    db.pragma(`busy_timeout = ${SPOOL_BUSY_TIMEOUT_MS}`);
    // WAL: emits append without blocking a flush that reads; FULL: an event is on disk when emit returns.
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    const version = db.pragma('user_version', { simple: true }) as number;
    if (version > SPOOL_SCHEMA_VERSION)
      throw new Error(`spool schema version ${version} is newer than this agent's (${SPOOL_SCHEMA_VERSION})`);
    // A write on purpose: a read-only file or directory fails here, at open, and not on the first event.
    db.exec(`BEGIN IMMEDIATE; ${SPOOL_SCHEMA} ${SPOOL_RUN_INDEXES} ${SPOOL_RUN_TOTALS}`);
    if (dropEarlierRunSchema(db).length > 0) db.exec(`${SPOOL_RUN_INDEXES} ${SPOOL_RUN_TOTALS}`);
    if (db.prepare(SELECT_META).get(RUN_TOTALS_SEEDED) === undefined) db.exec(SEED_RUN_TOTALS);
    db.exec(`PRAGMA user_version = ${SPOOL_SCHEMA_VERSION}; COMMIT;`);
    tightenSqliteFiles(file);
    return db;
  } catch (err) {
    if (db.inTransaction) db.exec('ROLLBACK');
    db.close();
    throw err;
  }
}

/** Waits inside a SQLite statement for other writers of the spool before SQLITE_BUSY. */
export const SPOOL_BUSY_TIMEOUT_MS = 10_000;

export function isBusyError(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED'));
}

/** Blocks the thread: only where the caller is synchronous by contract (open, emit, close). */
export function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, Math.max(1, Math.round(ms)));
}

/** Renames the file (and its WAL, which belongs to it) to `<file>.corrupt-<time>`; returns the new name. */
export function moveAside(file: string, at: Date): string {
  const stamp = at.toISOString().replace(/[:.]/g, '-');
  const aside = `${file}.corrupt-${stamp}`;
  fs.renameSync(file, aside);
  for (const suffix of ['-wal', '-shm']) {
    try {
      if (suffix === '-wal') fs.renameSync(file + suffix, aside + suffix);
      else fs.rmSync(file + suffix, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
  return aside;
}

export function errorText(err: unknown): string {
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    return typeof code === 'string' && !err.message.includes(code) ? `${code}: ${err.message}` : err.message;
  }
  return String(err);
}
