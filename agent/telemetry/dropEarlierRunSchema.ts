import type Database from 'better-sqlite3';
import { RUN_TOTALS_TRIGGERS } from './runTotalsSql';
import { ENDED_RUN_INDEXES } from './spoolSql';

/**
 * Drops what an earlier version made of the run schema differently: the ended-run indexes made over
 * every run (ENDED_RUN_INDEXES without a WHERE), and the run-totals triggers whose WHEN tests the
 * status with `IN (…)` lists (RUN_TOTALS_TRIGGERS). The caller makes them again with SPOOL_RUN_INDEXES
 * and SPOOL_RUN_TOTALS in the same transaction, so no run's end can fall between. Returns the names
 * dropped: none once a file has this version's.
 */
export function dropEarlierRunSchema(db: Database.Database): string[] {
  const sqlOf = db.prepare<[string, string], string | undefined>(`SELECT sql FROM sqlite_master WHERE type = ? AND name = ?`).pluck();
  const earlier: Array<['INDEX' | 'TRIGGER', string]> = [];
  for (const name of ENDED_RUN_INDEXES) {
    const sql = sqlOf.get('index', name);
    if (sql !== undefined && !/ WHERE /i.test(sql)) earlier.push(['INDEX', name]);
  }
  for (const name of RUN_TOTALS_TRIGGERS) {
    if (/ IN \(/i.test(sqlOf.get('trigger', name) ?? '')) earlier.push(['TRIGGER', name]);
  }
  for (const [kind, name] of earlier) db.exec(`DROP ${kind} ${name}`);
  return earlier.map(([, name]) => name);
}
