import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Logger } from '../log/logger';
import { SPOOL_SCHEMA, SPOOL_SCHEMA_VERSION } from './spoolSql';

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

const SQLITE_HEADER = Buffer.from('SQLite format 3\0', 'latin1');
const CORRUPT_CODES = new Set(['SQLITE_NOTADB', 'SQLITE_CORRUPT']);

/** A spool file that exists but is not a usable SQLite database. */
export class CorruptSpoolError extends Error {}

export function isCorruptionError(err: unknown): boolean {
  if (err instanceof CorruptSpoolError) return true;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && [...CORRUPT_CODES].some((c) => code.startsWith(c));
}

/**
 * Opens the spool at `primary`, else at `fallbackPath` (the seed's /tmp fallback), moving a corrupt file
 * aside and starting a new one in its place. Returns no database, never throws, when neither path can
 * be written: the caller then counts what it cannot store.
 */
export function openSpoolDatabase(primary: string, fallbackPath: string, logger: Logger, now: () => Date): OpenSpoolResult {
  const problems: string[] = [];
  for (const [file, fallback] of [[primary, false], [fallbackPath, true]] as const) {
    if (fallback && path.resolve(file) === path.resolve(primary)) continue;
    try {
      return { opened: { db: openWithRecovery(file, logger, now, problems), path: file, fallback }, error: problems.length > 0 ? problems.join('; ') : null };
    } catch (err) {
      const message = `telemetry spool ${file} cannot be written: ${errorText(err)}`;
      problems.push(message);
      logger[fallback ? 'error' : 'warn']({ path: file, err: errorText(err) }, message);
    }
  }
  return { opened: null, error: problems.join('; ') };
}

function openWithRecovery(file: string, logger: Logger, now: () => Date, problems: string[]): Database.Database {
  try {
    return openAt(file);
  } catch (err) {
    if (!isCorruptionError(err)) throw err;
    const aside = moveAside(file, now());
    const message = `telemetry spool ${file} is corrupt (${errorText(err)}); moved aside to ${aside} and started a new one`;
    problems.push(message);
    logger.error({ path: file, movedTo: aside, err: errorText(err) }, message);
    return openAt(file);
  }
}

export function openAt(file: string): Database.Database {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  checkHeader(file);
  const db = new Database(file);
  try {
    // WAL: emits append without blocking a flush that reads; FULL: an event is on disk when emit returns.
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    // Other processes (a CLI emit, a CLI flush) write the same file; wait briefly rather than lose an event.
    db.pragma('busy_timeout = 5000');
    const version = db.pragma('user_version', { simple: true }) as number;
    if (version > SPOOL_SCHEMA_VERSION) throw new Error(`spool schema version ${version} is newer than this agent's (${SPOOL_SCHEMA_VERSION})`);
    // A write on purpose: a read-only file or directory fails here, at open, and not on the first event.
    db.exec(`BEGIN IMMEDIATE; ${SPOOL_SCHEMA} PRAGMA user_version = ${SPOOL_SCHEMA_VERSION}; COMMIT;`);
    return db;
  } catch (err) {
    db.close();
    throw err;
  }
}

function checkHeader(file: string): void {
  let fd: number;
  try {
    fd = fs.openSync(file, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  try {
    const head = Buffer.alloc(SQLITE_HEADER.length);
    const read = fs.readSync(fd, head, 0, head.length, 0);
    // An empty file is what a crash during creation leaves; SQLite initialises it.
    if (read > 0 && !head.subarray(0, read).equals(SQLITE_HEADER.subarray(0, read))) throw new CorruptSpoolError('not an SQLite database (bad header)');
    if (read > 0 && read < SQLITE_HEADER.length) throw new CorruptSpoolError('truncated SQLite header');
  } finally {
    fs.closeSync(fd);
  }
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
