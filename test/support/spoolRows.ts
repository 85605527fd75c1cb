import Database from 'better-sqlite3';
import * as fs from 'node:fs';

export interface SpoolRowSeen {
  eventId: string;
  runId: string;
  event: string;
}

/** Every event in a spool file, read with a plain read-only SQLite connection (as an operator would). */
export function spoolRowsIn(file: string): SpoolRowSeen[] {
  if (!fs.existsSync(file)) return [];
  const db = new Database(file, { readonly: true });
  try {
    db.pragma('busy_timeout = 10000');
    return db.prepare('SELECT event_id AS eventId, run_id AS runId, event FROM event ORDER BY seq').all() as SpoolRowSeen[];
  } finally {
    db.close();
  }
}

/** How many times each (run, event) pair occurs. */
export function countByRun(rows: readonly SpoolRowSeen[], event: string): Map<string, number> {
  const counts = new Map<string, number>();
  for (const r of rows) if (r.event === event) counts.set(r.runId, (counts.get(r.runId) ?? 0) + 1);
  return counts;
}
