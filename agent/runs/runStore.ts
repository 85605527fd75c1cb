import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { RunInfo } from '../../shared/protocol';
import type { Logger } from '../log/logger';
import { CorruptSpoolError, errorText, isCorruptionError, moveAside, retryWhileBusy } from '../telemetry/openSpoolDatabase';
import { guardSqliteFiles, tightenSqliteFiles } from '../telemetry/sqliteFileGuard';

/** A run as kept on disk: what clients see plus what a later agent needs to adopt it. */
export interface StoredRun extends RunInfo {
  /** /proc start time of `pid`. */
  startTime: number | null;
  statusFile: string | null;
  /** The process (agent or CLI) that manages the run, and its start time. */
  ownerPid: number;
  ownerStartTime: number;
}

/** What status and the log can say about the store: a write that failed, a file moved aside. */
export interface RunStoreHealth {
  /** The last write that failed (SQLITE_FULL on a full disk…), null once writes succeed again. */
  error: string | null;
  /** Runs whose newest state is only in memory, waiting for the write to succeed. */
  unsaved: number;
  /** Set when a corrupt state file was moved aside at open. */
  recovered: string | null;
}

const KEEP_FINISHED = 5000;
const RETRY_MS = 2_000;
const OPEN_BUSY_WAIT_MS = 120_000;
const silent: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} };

/** What clients see of a stored run: without the fields only a later agent needs to adopt it. */
export function toRunInfo(run: StoredRun): RunInfo {
  const { startTime: _s, statusFile: _f, ownerPid: _p, ownerStartTime: _o, ...info } = run;
  return info;
}

/**
 * The agent's local record of runs (SQLite, WAL). It outlives the agent: a new agent reads which runs
 * were left running and adopts them; `quantilica runs` reads recent ones.
 *
 * A save never throws into the run manager: a fetcher must go on and finish when the disk is full.
 * The newest state of each run that could not be written is kept in memory (and read back from there)
 * and written again every few seconds and on the next save. A corrupt file is moved aside at open
 * (`state.db.corrupt-<time>`) and a new one started: the runs that live are found again from their
 * status files and lock records.
 */
export class RunStore {
  private readonly db: Database.Database;
  private readonly upsertStmt: Database.Statement;
  private readonly unsaved = new Map<string, StoredRun>();
  private saves = 0;
  private lastError: string | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  readonly recovered: string | null = null;

  constructor(private readonly file: string, private readonly logger: Logger = silent, now: () => Date = () => new Date()) {
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    let db: Database.Database;
    try {
      db = openStateDatabase(file);
    } catch (err) {
      if (!isCorruptionError(err)) throw new Error(`cannot open the state file ${file}: ${errorText(err)}`);
      const aside = moveAside(file, now());
      this.recovered = `state file ${file} was corrupt (${errorText(err)}); moved aside to ${aside} and started a new one; runs still alive are adopted from their status files`;
      logger.error({ path: file, movedTo: aside, err: errorText(err) }, this.recovered);
      db = openStateDatabase(file);
    }
    this.db = db;
    this.upsertStmt = this.db.prepare(`INSERT INTO runs (run_id, fetcher, status, enqueued_at, owner_pid, owner_start_time, body)
      VALUES (@runId, @fetcher, @status, @enqueuedAt, @ownerPid, @ownerStartTime, @body)
      ON CONFLICT(run_id) DO UPDATE SET status = excluded.status, owner_pid = excluded.owner_pid,
        owner_start_time = excluded.owner_start_time, body = excluded.body`);
  }

  /** Records the run's state; on failure keeps it in memory and retries (see health()). Never throws. */
  save(run: StoredRun): void {
    this.unsaved.set(run.runId, { ...run });
    this.writeUnsaved();
  }

  health(): RunStoreHealth {
    return { error: this.lastError, unsaved: this.unsaved.size, recovered: this.recovered };
  }

  /** Runs left waiting or running, by any process. */
  active(): StoredRun[] {
    const stored = this.rows(`SELECT body FROM runs WHERE status IN ('waiting', 'running') ORDER BY enqueued_at`);
    return this.overlay(stored).filter((r) => r.status === 'waiting' || r.status === 'running');
  }

  recent(limit: number): StoredRun[] {
    const n = Math.max(1, Math.min(limit, 10000));
    const merged = this.overlay(this.rows(`SELECT body FROM runs ORDER BY enqueued_at DESC LIMIT ${n}`));
    return merged.sort((a, b) => (a.enqueuedAt < b.enqueuedAt ? 1 : a.enqueuedAt > b.enqueuedAt ? -1 : 0)).slice(0, n);
  }

  get(runId: string): StoredRun | null {
    const pending = this.unsaved.get(runId);
    if (pending) return { ...pending };
    const row = this.db.prepare(`SELECT body FROM runs WHERE run_id = ?`).get(runId) as { body: string } | undefined;
    return row ? (JSON.parse(row.body) as StoredRun) : null;
  }

  /** True when a running run's process is exactly this pid with this start time (never a record's word alone). */
  hasRunningProcess(pid: number, startTime: number): boolean {
    for (const r of this.unsaved.values()) if (r.status === 'running' && r.pid === pid && r.startTime === startTime) return true;
    return this.db.prepare(`SELECT 1 FROM runs WHERE status = 'running' AND json_extract(body, '$.pid') = ? AND json_extract(body, '$.startTime') = ? LIMIT 1`).get(pid, startTime) !== undefined;
  }

  lastStartedAt(fetcher: string): Date | null {
    const row = this.db.prepare(`SELECT max(json_extract(body, '$.startedAt')) AS at FROM runs WHERE fetcher = ?`).get(fetcher) as { at: string | null };
    let latest = row.at;
    for (const r of this.unsaved.values()) if (r.fetcher === fetcher && r.startedAt && (!latest || r.startedAt > latest)) latest = r.startedAt;
    return latest ? new Date(latest) : null;
  }

  close(): void {
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.writeUnsaved();
    if (this.unsaved.size > 0) this.logger.error({ path: this.file, unsaved: this.unsaved.size, err: this.lastError }, 'closing the state file with run states it could not store');
    this.db.close();
  }

  private writeUnsaved(): void {
    if (this.unsaved.size === 0) return;
    const runs = [...this.unsaved.values()];
    try {
      this.db.transaction(() => {
        for (const run of runs) {
          this.upsertStmt.run({ runId: run.runId, fetcher: run.fetcher, status: run.status, enqueuedAt: run.enqueuedAt, ownerPid: run.ownerPid, ownerStartTime: run.ownerStartTime, body: JSON.stringify(run) });
        }
      })();
    } catch (err) {
      this.failed(err);
      return;
    }
    // A save made meanwhile (none can be: this is synchronous) would replace the object; only drop what was written.
    for (const run of runs) if (this.unsaved.get(run.runId) !== undefined) this.unsaved.delete(run.runId);
    if (this.lastError !== null) {
      this.logger.warn({ path: this.file, written: runs.length }, 'the state file takes writes again; run states kept in memory are stored');
      this.lastError = null;
    }
    // Trim now and then rather than on every save: the table is a window of recent history.
    this.saves += runs.length;
    if (this.saves >= 500) {
      this.saves = 0;
      this.trim();
    }
  }

  private failed(err: unknown): void {
    const first = this.lastError === null;
    this.lastError = `cannot write the state file ${this.file}: ${errorText(err)}`;
    if (first) this.logger.error({ path: this.file, unsaved: this.unsaved.size, err: errorText(err) }, `${this.lastError}; keeping run states in memory and retrying every ${RETRY_MS / 1000} s`);
    if (this.retryTimer === null) {
      this.retryTimer = setTimeout(() => {
        this.retryTimer = null;
        this.writeUnsaved();
      }, RETRY_MS);
      this.retryTimer.unref();
    }
  }

  private overlay(stored: StoredRun[]): StoredRun[] {
    if (this.unsaved.size === 0) return stored;
    const merged = stored.map((r) => this.unsaved.get(r.runId) ?? r);
    const seen = new Set(stored.map((r) => r.runId));
    for (const r of this.unsaved.values()) if (!seen.has(r.runId)) merged.push({ ...r });
    return merged;
  }

  private rows(sql: string): StoredRun[] {
    return (this.db.prepare(sql).all() as Array<{ body: string }>).map((r) => JSON.parse(r.body) as StoredRun);
  }

  private trim(): void {
    try {
      this.db.prepare(`DELETE FROM runs WHERE status NOT IN ('waiting', 'running') AND run_id NOT IN
        (SELECT run_id FROM runs ORDER BY enqueued_at DESC LIMIT ${KEEP_FINISHED})`).run();
    } catch (err) {
      this.logger.warn({ path: this.file, err: errorText(err) }, 'cannot trim the state file');
    }
  }
}

/**
 * Opens (creating 0600) and checks the state file (SQLite's header check, then quick_check), so a damaged file is
 * found here and moved aside, not by every later command. Busy (a burst of CLI runs): waits.
 */
function openStateDatabase(file: string): Database.Database {
  // A file that is not a database fails below with SQLITE_NOTADB, a damaged one at quick_check.
  guardSqliteFiles(file);
  return retryWhileBusy(() => configure(file), OPEN_BUSY_WAIT_MS);
}

function configure(file: string): Database.Database {
  const db = new Database(file);
  try {
    // busy_timeout first: switching to WAL takes a lock, and a burst of CLIs would fail at once without it.
    db.pragma('busy_timeout = 10000');
    db.pragma('journal_mode = WAL');
    // NORMAL in WAL mode survives a crash of the process (kill -9), which is what adoption needs; only
    // a power cut can lose the last commits, and the telemetry spool (synchronous FULL) is the durable
    // record of runs. FULL here would cost an fsync on every state change of every run.
    db.pragma('synchronous = NORMAL');
    const check = db.pragma('quick_check', { simple: true }) as string;
    if (check !== 'ok') throw new CorruptSpoolError(`${file}: quick_check says ${check}`);
    db.exec(`CREATE TABLE IF NOT EXISTS runs (
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
    tightenSqliteFiles(file);
    return db;
  } catch (err) {
    db.close();
    throw err;
  }
}
