import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { DiskGateState, DiskSample } from '../../shared/protocol';
import { systemClock, type Clock } from '../schedule/clock';

/** Samples older than this are deleted: the Station panel shows 24 h, a day more is slack. */
export const HISTORY_RETENTION_MS = 48 * 3600_000;
/** And never more rows than this, whatever the poll interval (tests poll every 0.2 s). */
export const HISTORY_MAX_SAMPLES = 20_000;

/**
 * The samples the Station panel draws that nothing else keeps: free disk space at every poll of the
 * disk gate. SQLite (WAL) in the agent's home, bounded by age and by row count on every insert, so it
 * stays small however long the agent runs. (Run spans need no copy: the run store has them.)
 */
export class HistoryStore {
  private readonly db: Database.Database;
  private readonly insert: Database.Statement;
  private readonly pruneAge: Database.Statement;
  private readonly pruneCount: Database.Statement;

  constructor(
    file: string,
    private readonly clock: Clock = systemClock,
    private readonly retentionMs = HISTORY_RETENTION_MS,
    private readonly maxSamples = HISTORY_MAX_SAMPLES,
  ) {
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    this.db = new Database(file);
    fs.chmodSync(file, 0o600);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = NORMAL');
    this.db.pragma('busy_timeout = 5000');
    this.db.exec(`CREATE TABLE IF NOT EXISTS disk_samples (
      at INTEGER NOT NULL,
      free_gb REAL,
      state TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS disk_samples_at ON disk_samples(at);`);
    this.insert = this.db.prepare('INSERT INTO disk_samples (at, free_gb, state) VALUES (?, ?, ?)');
    this.pruneAge = this.db.prepare('DELETE FROM disk_samples WHERE at < ?');
    this.pruneCount = this.db.prepare(
      'DELETE FROM disk_samples WHERE rowid IN (SELECT rowid FROM disk_samples ORDER BY at DESC LIMIT -1 OFFSET ?)',
    );
  }

  addDiskSample(freeGb: number | null, state: DiskGateState): void {
    const now = this.clock.now().getTime();
    this.db.transaction(() => {
      this.insert.run(now, freeGb, state);
      this.pruneAge.run(now - this.retentionMs);
      this.pruneCount.run(this.maxSamples);
    })();
  }

  /** Samples at or after `sinceMs`, oldest first. */
  diskSamples(sinceMs: number): DiskSample[] {
    const rows = this.db.prepare('SELECT at, free_gb, state FROM disk_samples WHERE at >= ? ORDER BY at').all(sinceMs) as Array<{
      at: number;
      free_gb: number | null;
      state: DiskGateState;
    }>;
    return rows.map((r) => ({ at: new Date(r.at).toISOString(), freeGb: r.free_gb, state: r.state }));
  }

  /** How many samples are kept and the oldest one's time (for the retention test and status). */
  extent(): { count: number; oldestMs: number | null } {
    const row = this.db.prepare('SELECT count(*) AS n, min(at) AS oldest FROM disk_samples').get() as { n: number; oldest: number | null };
    return { count: row.n, oldestMs: row.oldest };
  }

  close(): void {
    this.db.close();
  }
}
