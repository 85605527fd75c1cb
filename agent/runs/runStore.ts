import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import { isFinalStatus, RUN_STATUSES, type RunInfo } from '../../shared/protocol';
import type { Logger } from '../log/logger';
import type { RunTotals } from '../metrics/runTotals';
import { errorText, isCorruptionError, moveAside } from '../telemetry/openSpoolDatabase';
import type { RunRow, Spool } from '../telemetry/spool';
import { importRuns } from '../telemetry/spoolCopy';
import { SELECT_RUN_DURATIONS, SELECT_RUN_TOTALS } from '../telemetry/runTotalsSql';
import { SELECT_ALL_RUNS } from '../telemetry/spoolSql';
import { guardSqliteFiles } from '../telemetry/sqliteFileGuard';

/** The most runs one `recent` reads: a bound on one query's memory, whatever a caller asks. */
const MAX_RECENT_RUNS = 10_000;

/** The statuses of a run that has not ended, as an SQL list: `('waiting', 'running')`. */
const LIVE = `(${RUN_STATUSES.filter((s) => !isFinalStatus(s))
  .map((s) => `'${s}'`)
  .join(', ')})`;

/** A run as kept on disk: what clients see plus what a later agent needs to adopt it. */
export interface StoredRun extends RunInfo {
  /** /proc start time of `pid`. */
  startTime: number | null;
  statusFile: string | null;
  /** The process (agent or CLI) that manages the run, and its start time. */
  ownerPid: number;
  ownerStartTime: number;
  /** Whether the owner is an agent (whose waiting runs the next agent resumes) or a CLI; absent: a CLI. */
  ownerRole?: 'agent' | 'cli';
  /** When the run began its present wait (the disk gate, a slot): a next agent counts its limit from there. */
  waitSince?: string | null;
  /** A GitHub sync under a timeout: the working time it had left when its present leg started or it hibernated (ms). */
  workLeftMs?: number | null;
  /**
   * A client cancelled the running run, kept for an agent that adopts it: set by the start of a run
   * cancelled while its spawn was on its way, and by `askCancel` when the agent stops before a
   * cancelled run's end. The adopting agent sends TERM again and records the end `cancelled`.
   */
  cancelAsked?: boolean;
}

/** What status and the log can say about the store: a write that failed, a file moved aside. */
export interface RunStoreHealth {
  /** Why run states are held in memory (the spool's trouble), null while they are written. */
  error: string | null;
  /** Runs whose newest state is only in memory, waiting for a file to take it. */
  unsaved: number;
  /** Set when a corrupt state file was moved aside. */
  recovered: string | null;
}

const KEEP_FINISHED = 5000;
const TRIM_EVERY = 500;
const silent: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} };

/** What clients see of a stored run: without the fields only a later agent needs to adopt it. */
export function toRunInfo(run: StoredRun): RunInfo {
  const {
    startTime: _s,
    statusFile: _f,
    ownerPid: _p,
    ownerStartTime: _o,
    ownerRole: _r,
    waitSince: _w,
    workLeftMs: _l,
    cancelAsked: _c,
    ...info
  } = run;
  return info;
}

export function toRunRow(run: StoredRun): RunRow {
  return {
    runId: run.runId,
    fetcher: run.fetcher,
    status: run.status,
    enqueuedAt: run.enqueuedAt,
    ownerPid: run.ownerPid,
    ownerStartTime: run.ownerStartTime,
    body: JSON.stringify(run),
  };
}

/**
 * The agent's local record of runs. It lives in the telemetry spool's database (the `runs` table), so
 * that a run's state and its telemetry event are written in one transaction (Spool.commit, group-
 * committed). It outlives the agent: a new agent reads which runs were left running and adopts them;
 * `quantilica runs` reads recent ones.
 *
 * A save never throws into the run manager: a fetcher must go on and finish when the disk is full.
 * What no file takes (the configured spool and its fallback both full) is held in memory by the
 * spool, read back from there, and written when a file takes writes again.
 *
 * A state.db of an earlier version (QUANTILICA_HOME/state.db) is moved in once and renamed
 * `state.db.migrated`; a corrupt one is moved aside (`state.db.corrupt-<time>`): the runs that live
 * are found again from their status files and lock records.
 */
export class RunStore {
  private writes = 0;
  private readonly keepFinished: number;
  readonly recovered: string | null = null;

  constructor(
    private readonly spool: Spool,
    legacyFile: string | null,
    private readonly logger: Logger = silent,
    now: () => Date = () => new Date(),
    /** Retention's count (QUANTILICA_RETENTION_RUNS): the trim never takes the table below it. */
    retentionRuns = 0,
  ) {
    this.keepFinished = Math.max(KEEP_FINISHED, retentionRuns);
    if (legacyFile !== null) this.recovered = this.migrate(legacyFile, now);
  }

  /** Records the run's state; resolves once it is durable (or held). Never rejects. */
  save(run: StoredRun): Promise<void> {
    this.trimNowAndThen();
    return this.spool.commit([toRunRow(run)], []);
  }

  health(): RunStoreHealth {
    const unsaved = this.spool.heldRunCount;
    return {
      error: unsaved > 0 ? (this.spool.status().error ?? 'no spool file takes run states now') : null,
      unsaved,
      recovered: this.recovered,
    };
  }

  /** Runs left waiting or running, by any process. */
  active(): StoredRun[] {
    const stored = this.rows(`SELECT body FROM runs WHERE status IN ${LIVE} ORDER BY enqueued_at`);
    return this.overlay(stored).filter((r) => !isFinalStatus(r.status));
  }

  recent(limit: number): StoredRun[] {
    const n = Math.max(1, Math.min(limit, MAX_RECENT_RUNS));
    const merged = this.overlay(this.rows(`SELECT body FROM runs ORDER BY enqueued_at DESC LIMIT ${n}`));
    return merged.sort((a, b) => (a.enqueuedAt < b.enqueuedAt ? 1 : a.enqueuedAt > b.enqueuedAt ? -1 : 0)).slice(0, n);
  }

  get(runId: string): StoredRun | null {
    // Only this run's newest unsaved state is parsed: under a burst dozens of runs wait for a commit.
    const pending = this.spool.unsavedRun(runId);
    if (pending) return JSON.parse(pending.body) as StoredRun;
    const body = this.spool.storedRunBody(runId);
    return body === null ? null : (JSON.parse(body) as StoredRun);
  }

  /** True when a running run's process is exactly this pid with this start time (never a record's word alone). */
  hasRunningProcess(pid: number, startTime: number): boolean {
    for (const r of this.unsaved().values()) if (r.status === 'running' && r.pid === pid && r.startTime === startTime) return true;
    return (
      this.spool.withDatabase(
        (db) =>
          db
            .prepare(
              `SELECT 1 FROM runs WHERE status = 'running' AND json_extract(body, '$.pid') = ? AND json_extract(body, '$.startTime') = ? LIMIT 1`,
            )
            .get(pid, startTime) !== undefined,
      ) ?? false
    );
  }

  lastStartedAt(fetcher: string): Date | null {
    const row = this.spool.withDatabase(
      (db) =>
        db.prepare(`SELECT max(json_extract(body, '$.startedAt')) AS at FROM runs WHERE fetcher = ?`).get(fetcher) as { at: string | null },
    );
    let latest = row?.at ?? null;
    for (const r of this.unsaved().values())
      if (r.fetcher === fetcher && r.startedAt && (!latest || r.startedAt > latest)) latest = r.startedAt;
    return latest ? new Date(latest) : null;
  }

  /**
   * Retention of ended runs' rows (retention.ts), by the rule their logs follow: rows that ended
   * before `olderThan` or are beyond the newest `keep` ended runs go. Kept whatever their age: runs
   * still waiting or running, `active` ids, and the newest started run of each fetcher (the
   * schedule's catch-up reads when a fetcher last ran). Telemetry events are not touched. Returns
   * how many rows were removed.
   */
  pruneEnded(olderThan: Date, keep: number, active: ReadonlySet<string>): number {
    const removed = this.spool.withDatabase((db) => {
      // Each part reads only the rows it may remove (through runs_enqueued), never the whole history:
      // an ended run is enqueued before it ends, so one that ended before `olderThan` was enqueued before it.
      const old = db
        .prepare(
          `SELECT run_id AS runId, fetcher, json_extract(body, '$.startedAt') AS startedAt FROM runs
          WHERE enqueued_at < @before AND status NOT IN ${LIVE}
            AND coalesce(json_extract(body, '$.finishedAt'), enqueued_at) < @before`,
        )
        .all({ before: olderThan.toISOString() }) as Array<{ runId: string; fetcher: string; startedAt: string | null }>;
      const ended = (db.prepare(`SELECT count(*) AS n FROM runs WHERE status NOT IN ${LIVE}`).get() as { n: number }).n;
      const beyond =
        ended > keep
          ? (db
              .prepare(
                `SELECT run_id AS runId, fetcher, json_extract(body, '$.startedAt') AS startedAt FROM runs
                WHERE status NOT IN ${LIVE} ORDER BY enqueued_at DESC LIMIT -1 OFFSET ?`,
              )
              .all(keep) as Array<{ runId: string; fetcher: string; startedAt: string | null }>)
          : [];
      if (old.length === 0 && beyond.length === 0) return 0;
      const last = new Map(
        (
          db.prepare(`SELECT fetcher, max(json_extract(body, '$.startedAt')) AS startedAt FROM runs GROUP BY fetcher`).all() as Array<{
            fetcher: string;
            startedAt: string | null;
          }>
        ).map((r) => [r.fetcher, r.startedAt]),
      );
      const remove = db.prepare(`DELETE FROM runs WHERE run_id = ? AND status NOT IN ${LIVE}`);
      let n = 0;
      db.transaction(() => {
        for (const r of [...old, ...beyond]) {
          const newest = last.get(r.fetcher) ?? null;
          if (active.has(r.runId) || (r.startedAt !== null && newest !== null && r.startedAt === newest)) continue;
          n += remove.run(r.runId).changes;
        }
      })();
      return n;
    });
    return removed ?? 0;
  }

  /** When the fetcher's most recent completed run finished (lateness, the metrics). */
  lastSucceededAt(fetcher: string): Date | null {
    const row = this.spool.withDatabase(
      (db) =>
        db
          .prepare(`SELECT max(json_extract(body, '$.finishedAt')) AS at FROM runs WHERE fetcher = ? AND status = 'completed'`)
          .get(fetcher) as { at: string | null },
    );
    let latest = row?.at ?? null;
    for (const r of this.unsaved().values())
      if (r.fetcher === fetcher && r.status === 'completed' && r.finishedAt && (!latest || r.finishedAt > latest)) latest = r.finishedAt;
    return latest ? new Date(latest) : null;
  }

  /** When the fetcher's earliest recorded run was queued (lateness of an entry that never completed). */
  firstRecordedAt(fetcher: string): Date | null {
    const row = this.spool.withDatabase(
      (db) => db.prepare(`SELECT min(enqueued_at) AS at FROM runs WHERE fetcher = ?`).get(fetcher) as { at: string | null },
    );
    return row?.at ? new Date(row.at) : null;
  }

  /** Each fetcher's last run that completed or failed, and which (`recovered` after a restart). */
  lastOutcomes(): Map<string, 'completed' | 'failed'> {
    // One seek per fetcher (runs_fetcher, newest first) rather than a correlated maximum per ended run.
    const rows =
      this.spool.withDatabase(
        (db) =>
          db
            .prepare(
              `SELECT f.fetcher, (SELECT status FROM runs WHERE fetcher = f.fetcher AND status IN ('completed', 'failed')
        ORDER BY enqueued_at DESC LIMIT 1) AS status FROM (SELECT DISTINCT fetcher FROM runs) f`,
            )
            .all() as Array<{ fetcher: string; status: 'completed' | 'failed' | null }>,
      ) ?? [];
    const outcomes = new Map<string, 'completed' | 'failed'>();
    for (const r of rows) if (r.status !== null) outcomes.set(r.fetcher, r.status);
    return outcomes;
  }

  /**
   * What every ended run adds to the metrics' counters (kept by the spool's triggers as runs end), so
   * an agent restart is no counter reset: a few dozen rows however long the history.
   */
  endedTotals(): RunTotals {
    return (
      this.spool.withDatabase((db) => ({
        ends: db.prepare(SELECT_RUN_TOTALS).all() as RunTotals['ends'],
        durations: db.prepare(SELECT_RUN_DURATIONS).all() as RunTotals['durations'],
      })) ?? { ends: [], durations: [] }
    );
  }

  /** The newest unsaved state of each run (held in memory or queued for the next commit). */
  private unsaved(): Map<string, StoredRun> {
    const map = new Map<string, StoredRun>();
    for (const row of this.spool.unsavedRuns()) map.set(row.runId, JSON.parse(row.body) as StoredRun);
    return map;
  }

  private overlay(stored: StoredRun[]): StoredRun[] {
    const unsaved = this.unsaved();
    if (unsaved.size === 0) return stored;
    const merged = stored.map((r) => unsaved.get(r.runId) ?? r);
    const seen = new Set(stored.map((r) => r.runId));
    for (const r of unsaved.values()) if (!seen.has(r.runId)) merged.push(r);
    return merged;
  }

  private rows(sql: string): StoredRun[] {
    const rows = this.spool.withDatabase((db) => db.prepare(sql).all() as Array<{ body: string }>) ?? [];
    return rows.map((r) => JSON.parse(r.body) as StoredRun);
  }

  /** The table is a window of recent history: trimmed now and then rather than on every save. */
  private trimNowAndThen(): void {
    this.writes += 1;
    if (this.writes < TRIM_EVERY) return;
    this.writes = 0;
    try {
      this.spool.withDatabase((db) => {
        // Counted first (an index scan): the delete reads every row, so it runs only when there is a surplus.
        if ((db.prepare(`SELECT count(*) AS n FROM runs`).get() as { n: number }).n <= this.keepFinished) return;
        db.prepare(
          `DELETE FROM runs WHERE status NOT IN ${LIVE} AND run_id NOT IN
        (SELECT run_id FROM runs ORDER BY enqueued_at DESC LIMIT ${this.keepFinished})`,
        ).run();
      });
    } catch (err) {
      this.logger.warn({ err: errorText(err) }, 'cannot trim the run history');
    }
  }

  /** Moves the runs of an earlier version's state.db into the spool; returns a message if it was corrupt. */
  private migrate(file: string, now: () => Date): string | null {
    if (fs.lstatSync(file, { throwIfNoEntry: false }) === undefined) return null;
    let runs: RunRow[];
    try {
      guardSqliteFiles(file);
      const db = new Database(file);
      try {
        db.pragma('busy_timeout = 10000');
        const check = db.pragma('quick_check', { simple: true }) as string;
        if (check !== 'ok') throw Object.assign(new Error(`quick_check says ${check}`), { code: 'SQLITE_CORRUPT' });
        const hasRuns = db.prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'`).get() !== undefined;
        runs = hasRuns ? (db.prepare(SELECT_ALL_RUNS).all() as RunRow[]) : [];
      } finally {
        db.close();
      }
    } catch (err) {
      if (!isCorruptionError(err)) {
        this.logger.error(
          { path: file, err: errorText(err) },
          `cannot read the state file ${file} of an earlier version; its runs are moved in at the next start`,
        );
        return null;
      }
      const aside = moveAside(file, now());
      const message = `state file ${file} was corrupt (${errorText(err)}); moved aside to ${aside}; runs still alive are adopted from their status files`;
      this.logger.error({ path: file, movedTo: aside, err: errorText(err) }, message);
      return message;
    }
    const moved = this.spool.withDatabase((db) => {
      importRuns(db, runs);
      return true;
    });
    if (moved === null) return null;
    fs.renameSync(file, `${file}.migrated`);
    for (const suffix of ['-wal', '-shm']) fs.rmSync(file + suffix, { force: true });
    this.logger.info(
      { path: file, runs: runs.length },
      `moved ${runs.length} runs from ${file} into the telemetry spool's database; the old file is kept as ${file}.migrated`,
    );
    return null;
  }
}
