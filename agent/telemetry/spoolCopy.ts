import type Database from 'better-sqlite3';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Logger } from '../log/logger';
import { errorText, openAt } from './openSpoolDatabase';
import { ensurePrivateDir } from './privateDir';
import { IMPORT_RUN, INSERT_EVENT, SELECT_ALL_EVENTS, SELECT_ALL_RUNS, UPSERT_RUN } from './spoolSql';
import type { RunRow } from './spoolTypes';
import type { SpoolRow } from './spoolRow';

/** An event on its way into a spool file, with the time it was first spooled. */
export interface PendingRow extends SpoolRow {
  spooledMs: number;
  /** Carried over from a file that may share rows with the target: skipped when its id is there. */
  dedupe?: boolean;
}

type RawRow = [string, string, string, string, string, string, string, number];

/** Every event of an open spool, in spool order (a file deleted under us is still readable here). */
export function readAllRows(db: Database.Database): PendingRow[] {
  return (db.prepare(SELECT_ALL_EVENTS).raw().all() as RawRow[]).map(([eventId, runId, event, at, task, pool, payload, spooledMs]) => ({
    eventId,
    runId,
    event,
    at,
    task,
    pool,
    payload,
    spooledMs,
    dedupe: true,
  }));
}

/** Every run row of an open spool. */
export function readAllRuns(db: Database.Database): RunRow[] {
  return db.prepare(SELECT_ALL_RUNS).all() as RunRow[];
}

/** Prepared statements a write may reuse (the spool keeps them; a copy prepares its own). */
export interface WriteStatements {
  insert?: Database.Statement;
  upsertRun?: Database.Statement;
}

/**
 * Inserts events and upserts run rows in one transaction (one fsync), in order. Rows marked `dedupe`
 * are skipped when their event id is already in the file (the same file reopened after only its -wal
 * was deleted).
 */
export function insertRows(
  db: Database.Database,
  rows: readonly PendingRow[],
  prepared: WriteStatements = {},
  runs: readonly RunRow[] = [],
): void {
  const insert = prepared.insert ?? db.prepare(INSERT_EVENT);
  const upsertRun = runs.length === 0 ? null : (prepared.upsertRun ?? db.prepare(UPSERT_RUN));
  db.transaction(() => {
    for (const run of runs) upsertRun!.run(run);
    const present = rows.some((r) => r.dedupe === true) ? presentIds(db) : null;
    for (const r of rows) {
      if (r.dedupe === true && present?.has(r.eventId)) continue;
      insert.run(r.eventId, r.runId, r.event, r.at, r.task, r.pool, r.payload, r.spooledMs);
    }
  })();
}

/** Adds runs from an older file (state.db, the fallback) without overwriting newer rows. */
export function importRuns(db: Database.Database, runs: readonly RunRow[]): void {
  const insert = db.prepare(IMPORT_RUN);
  db.transaction(() => {
    for (const run of runs) insert.run(run);
  })();
}

function presentIds(db: Database.Database): Set<string> {
  return new Set(db.prepare('SELECT event_id FROM event').pluck().all() as string[]);
}

/**
 * Moves every event of the fallback spool into `target` (the configured spool, writable again), so
 * nothing is left where no flusher looks. The fallback's write lock is held throughout: two processes
 * draining at once cannot both copy a row. Target first, then the delete: a crash in between leaves a
 * row in both, which PostgreSQL keeps once (event ids are unique there). Returns the number moved.
 */
export function drainFallback(target: Database.Database, fallbackPath: string, logger: Logger): number {
  if (fs.lstatSync(fallbackPath, { throwIfNoEntry: false }) === undefined) return 0;
  ensurePrivateDir(path.dirname(fallbackPath));
  const source = openAt(fallbackPath, 10_000);
  try {
    source.exec('BEGIN IMMEDIATE');
    const rows = readAllRows(source).map((r) => ({ ...r, dedupe: false }));
    // Runs written while on the fallback are newer than the configured file's: they replace them.
    const runs = readAllRuns(source);
    if (rows.length > 0 || runs.length > 0) insertRows(target, rows, {}, runs);
    source.exec('DELETE FROM event; DELETE FROM runs; COMMIT');
    if (rows.length > 0)
      logger.warn(
        { fallback: fallbackPath, moved: rows.length },
        `moved ${rows.length} telemetry events from the fallback spool ${fallbackPath} into the configured spool`,
      );
    return rows.length;
  } catch (err) {
    if (source.inTransaction) source.exec('ROLLBACK');
    throw new Error(`cannot drain the fallback spool ${fallbackPath}: ${errorText(err)}`);
  } finally {
    source.close();
  }
}
