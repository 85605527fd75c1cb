import type Database from 'better-sqlite3';
import {
  DELETE_EVENT,
  DELETE_THROUGH,
  INSERT_EVENT,
  QUARANTINE_EVENT,
  SELECT_BATCH,
  SELECT_META,
  SELECT_OLDEST,
  SELECT_PENDING,
  SELECT_QUARANTINED,
  SELECT_RUN_BODY,
  UPSERT_META,
  UPSERT_RUN,
} from './spoolSql';
import type { SpoolColumns, SpooledEvent } from './spoolTypes';

export interface SpoolStatements {
  insert: Database.Statement;
  batch: Database.Statement;
  deleteThrough: Database.Statement;
  deleteOne: Database.Statement;
  quarantine: Database.Statement;
  quarantined: Database.Statement;
  pending: Database.Statement;
  oldest: Database.Statement;
  meta: Database.Statement;
  upsertMeta: Database.Statement;
  upsertRun: Database.Statement;
  runBody: Database.Statement;
}
type BatchRow = [number, string, string, string, string, string, string, string];

export function prepareStatements(db: Database.Database): SpoolStatements {
  return {
    insert: db.prepare(INSERT_EVENT),
    batch: db.prepare(SELECT_BATCH),
    deleteThrough: db.prepare(DELETE_THROUGH),
    deleteOne: db.prepare(DELETE_EVENT),
    quarantine: db.prepare(QUARANTINE_EVENT),
    quarantined: db.prepare(SELECT_QUARANTINED),
    pending: db.prepare(SELECT_PENDING),
    oldest: db.prepare(SELECT_OLDEST),
    meta: db.prepare(SELECT_META),
    upsertMeta: db.prepare(UPSERT_META),
    upsertRun: db.prepare(UPSERT_RUN),
    runBody: db.prepare(SELECT_RUN_BODY),
  };
}

/** The oldest `limit` events, in spool order. */
export function readBatch(statements: SpoolStatements, limit: number): SpooledEvent[] {
  const rows = statements.batch.raw().all(limit) as BatchRow[];
  return rows.map(([seq, eventId, runId, event, at, task, pool, payload]) => ({ seq, eventId, runId, event, at, task, pool, payload }));
}

/**
 * The oldest `limit` events as columns, the shape the flush sends them in: no object per event, so a
 * flush of a million events keeps the heap small.
 */
export function readColumns(statements: SpoolStatements | null, limit: number): SpoolColumns {
  const columns: SpoolColumns = { seqs: [], eventIds: [], runIds: [], events: [], ats: [], tasks: [], pools: [], payloads: [] };
  if (statements === null) return columns;
  for (const row of statements.batch.raw().iterate(limit) as IterableIterator<BatchRow>) {
    columns.seqs.push(row[0]);
    columns.eventIds.push(row[1]);
    columns.runIds.push(row[2]);
    columns.events.push(row[3]);
    columns.ats.push(row[4]);
    columns.tasks.push(row[5]);
    columns.pools.push(row[6]);
    columns.payloads.push(row[7]);
  }
  return columns;
}

/** Moves events to the quarantine table with their reasons, in one transaction. */
export function quarantineRows(
  db: Database.Database,
  statements: SpoolStatements,
  items: ReadonlyArray<{ seq: number; reason: string }>,
): void {
  const at = Date.now();
  db.transaction(() => {
    for (const item of items) {
      statements.quarantine.run(item.reason, at, item.seq);
      statements.deleteOne.run(item.seq);
    }
  })();
}

/** Pending and quarantined counts and the age of the oldest pending event, in seconds. */
export function readCounts(statements: SpoolStatements): { pending: number; quarantined: number; oldestAgeSeconds: number | null } {
  const oldest = statements.oldest.pluck().get() as number | undefined;
  return {
    pending: statements.pending.pluck().get() as number,
    quarantined: statements.quarantined.pluck().get() as number,
    oldestAgeSeconds: oldest === undefined ? null : Math.max(0, (Date.now() - oldest) / 1000),
  };
}
