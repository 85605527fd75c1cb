import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { RunInfo } from '../../shared/protocol';

/** A run as kept on disk: what clients see plus what a later agent needs to adopt it. */
export interface StoredRun extends RunInfo {
  /** /proc start time of `pid`. */
  startTime: number | null;
  statusFile: string | null;
  /** The process (agent or CLI) that manages the run, and its start time. */
  ownerPid: number;
  ownerStartTime: number;
}

const KEEP_FINISHED = 5000;

/** What clients see of a stored run: without the fields only a later agent needs to adopt it. */
export function toRunInfo(run: StoredRun): RunInfo {
  const { startTime: _s, statusFile: _f, ownerPid: _p, ownerStartTime: _o, ...info } = run;
  return info;
}

/**
 * The agent's local record of runs (SQLite, WAL). It outlives the agent: a new agent reads which runs
 * were left running and adopts them; `quantilica runs` reads recent ones.
 */
export class RunStore {
  private readonly db: Database.Database;
  private readonly upsertStmt: Database.Statement;
  private saves = 0;

  constructor(file: string) {
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    this.db = new Database(file);
    this.db.pragma('journal_mode = WAL');
    // NORMAL in WAL mode survives a crash of the process (kill -9), which is what adoption needs; only
    // a power cut can lose the last commits, and the telemetry spool (synchronous FULL) is the durable
    // record of runs. FULL here would cost an fsync on every state change of every run.
    this.db.pragma('synchronous = NORMAL');
    this.db.pragma('busy_timeout = 5000');
    this.db.exec(`CREATE TABLE IF NOT EXISTS runs (
      run_id TEXT PRIMARY KEY,
      fetcher TEXT NOT NULL,
      status TEXT NOT NULL,
      enqueued_at TEXT NOT NULL,
      owner_pid INTEGER NOT NULL,
      owner_start_time INTEGER NOT NULL,
      body TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS runs_status ON runs(status);
    CREATE INDEX IF NOT EXISTS runs_fetcher ON runs(fetcher, enqueued_at);`);
    this.upsertStmt = this.db.prepare(`INSERT INTO runs (run_id, fetcher, status, enqueued_at, owner_pid, owner_start_time, body)
      VALUES (@runId, @fetcher, @status, @enqueuedAt, @ownerPid, @ownerStartTime, @body)
      ON CONFLICT(run_id) DO UPDATE SET status = excluded.status, owner_pid = excluded.owner_pid,
        owner_start_time = excluded.owner_start_time, body = excluded.body`);
  }

  save(run: StoredRun): void {
    this.upsertStmt.run({ runId: run.runId, fetcher: run.fetcher, status: run.status, enqueuedAt: run.enqueuedAt, ownerPid: run.ownerPid, ownerStartTime: run.ownerStartTime, body: JSON.stringify(run) });
    // Trim now and then rather than on every save: the table is a window of recent history.
    if (++this.saves % 500 === 0) this.trim();
  }

  /** Runs left waiting or running, by any process. */
  active(): StoredRun[] {
    return this.rows(`SELECT body FROM runs WHERE status IN ('waiting', 'running') ORDER BY enqueued_at`);
  }

  recent(limit: number): StoredRun[] {
    return this.rows(`SELECT body FROM runs ORDER BY enqueued_at DESC LIMIT ${Math.max(1, Math.min(limit, 10000))}`);
  }

  get(runId: string): StoredRun | null {
    const row = this.db.prepare(`SELECT body FROM runs WHERE run_id = ?`).get(runId) as { body: string } | undefined;
    return row ? (JSON.parse(row.body) as StoredRun) : null;
  }

  /** True when a running run's process is exactly this pid with this start time (never a record's word alone). */
  hasRunningProcess(pid: number, startTime: number): boolean {
    return this.db.prepare(`SELECT 1 FROM runs WHERE status = 'running' AND json_extract(body, '$.pid') = ? AND json_extract(body, '$.startTime') = ? LIMIT 1`).get(pid, startTime) !== undefined;
  }

  lastStartedAt(fetcher: string): Date | null {
    const row = this.db.prepare(`SELECT max(json_extract(body, '$.startedAt')) AS at FROM runs WHERE fetcher = ?`).get(fetcher) as { at: string | null };
    return row.at ? new Date(row.at) : null;
  }

  close(): void {
    this.db.close();
  }

  private rows(sql: string): StoredRun[] {
    return (this.db.prepare(sql).all() as Array<{ body: string }>).map((r) => JSON.parse(r.body) as StoredRun);
  }

  private trim(): void {
    this.db.prepare(`DELETE FROM runs WHERE status NOT IN ('waiting', 'running') AND run_id NOT IN
      (SELECT run_id FROM runs ORDER BY enqueued_at DESC LIMIT ${KEEP_FINISHED})`).run();
  }
}
