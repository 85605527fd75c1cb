import * as crypto from 'node:crypto';
import type { GithubBudget } from '../../../shared/protocolTypes';
import type { PullRequestRecord, WorkflowJobRecord, WorkflowRunRecord } from '../records';
import type { GithubDb, SqlRunner } from './githubDb';
import { existingSql, upsertSql, type EntityName } from './upsertSql';

export type Stage = 'changes' | 'checks';
export const STAGES: readonly Stage[] = ['changes', 'checks'];
export type SyncStatus = 'running' | 'completed' | 'failed' | 'cancelled';
export type Budget = GithubBudget;

/** The counters of a sync; they change only by `SET n = n + $k` (ADR 0006 item 2). */
export interface Counters {
  records_collected: number;
  records_created: number;
  requests_made: number;
  requests_saved: number;
  hibernations: number;
  /** requests_made by the budget each was reserved on. */
  requests_core: number;
  requests_graphql: number;
  /** Requests GitHub answered 304 Not Modified (in requests_made too; they cost no quota). */
  requests_not_modified: number;
}
const COUNTERS: ReadonlyArray<keyof Counters> = [
  'records_collected',
  'records_created',
  'requests_made',
  'requests_saved',
  'hibernations',
  'requests_core',
  'requests_graphql',
  'requests_not_modified',
];

/** What every sync in the store sent and how often it hibernated, in total and per sync (newest first). */
export interface SyncTotals {
  requests: Record<Budget, number>;
  hibernations: number;
  syncs: Array<{ id: string; requests: Record<Budget, number>; hibernations: number }>;
}

export interface QuotaSnapshot {
  remaining: number;
  limit: number;
  resetAt: number;
}

export interface SyncRow extends Counters {
  id: string;
  /** The agent's run that owns it; null for a sync of the CLI. */
  runId: string | null;
  status: SyncStatus;
  reason: string | null;
  repos: string[];
  secondaryBackoffs: number;
  /** A full load of every repository (`github sync --full`), not from the streams' cursors. */
  full: boolean;
  startedAt: number;
  finishedAt: number | null;
  progressAt: number;
  hibernatingUntil: number | null;
  budget: Budget | null;
  quota: Partial<Record<Budget, QuotaSnapshot>>;
}

export interface CheckpointRow {
  repo: string;
  stage: Stage;
  state: 'in-progress' | 'done' | 'not-reached';
  cursor: string | null;
  reason: string | null;
}

// What a run's stored jobs were read at: a later sync reads them again when the run's attempt or update
// differs, or when they were not all completed (a job still running when stored).
const MARK_JOBS = (now: string, runId: string, syncId: string, complete: string) =>
  `UPDATE github.workflow_run SET jobs_stored_at = ${now}, jobs_run_attempt = run_attempt, jobs_run_updated_at = updated_at,
  jobs_completed = CASE WHEN status = 'completed' AND ${complete} = 1 THEN 1 ELSE 0 END, jobs_sync_id = ${syncId} WHERE id = ${runId}`;

// The one statement that changes counters; progress_at moves with it (the stuck-sync reconciler reads it).
const INCREMENT = `UPDATE github.sync SET ${COUNTERS.map((c, i) => `${c} = ${c} + $${i + 2}`).join(', ')}, progress_at = $${COUNTERS.length + 2} WHERE id = $1`;

// PostgreSQL's one-statement page write: the counters grow by what the `up` CTE wrote ($3: now,
// and the given placeholders). Still an increment in SQL, never a value computed in the agent.
const pgCountUp = (
  now: string,
  made: string,
  saved: string,
  core: string,
  graphql: string,
  notModified: string,
) => `UPDATE github.sync SET records_collected = records_collected + (SELECT count(*) FROM up),
  records_created = records_created + (SELECT count(*) FROM up WHERE created),
  requests_made = requests_made + ${made}, requests_saved = requests_saved + ${saved},
  requests_core = requests_core + ${core}, requests_graphql = requests_graphql + ${graphql},
  requests_not_modified = requests_not_modified + ${notModified}, progress_at = ${now}`;

/** How long after a leg last said it works (its agent's heartbeat) it still counts as working. */
export const SYNC_ALIVE_WITHIN_MS = 5 * 60_000;

/** A second running sync of one catalog entry, refused by the database's one-running-sync-per-entry index. */
export class SyncActiveError extends Error {
  constructor(
    readonly entry: string,
    readonly syncId: string | null,
    readonly runId: string | null,
  ) {
    super(`entry ${entry} already has a sync running${syncId === null ? '' : ` (${syncId}${runId === null ? '' : `, run ${runId}`})`}`);
    this.name = 'SyncActiveError';
  }
}

function isUniqueViolation(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === '23505' || code === 'SQLITE_CONSTRAINT_UNIQUE';
}

/** The GitHub sync's storage, the same statements on PostgreSQL and on the embedded SQLite file. */
export class GithubStore {
  constructor(
    readonly db: GithubDb,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * A new running sync. `full`: a full load of every repository, whatever their streams' cursors
   * (`github sync --full`). With `owner` (an agent's run of a catalog entry) the row names both in the
   * same statement, and a second running sync of the entry is refused by the database (SyncActiveError).
   */
  async createSync(repos: readonly string[], options: { full?: boolean; owner?: { entry: string; runId: string } } = {}): Promise<string> {
    const { owner, full = false } = options;
    const id = `${new Date(this.now()).toISOString().slice(0, 10).replace(/-/g, '')}-${crypto.randomBytes(4).toString('hex')}`;
    const at = this.now();
    try {
      await this.db.query(
        'INSERT INTO github.sync (id, status, repos, started_at, progress_at, full_load, entry, run_id) VALUES ($1, $2, $3, $4, $4, $5, $6, $7)',
        [id, 'running', JSON.stringify(repos), at, full ? 1 : 0, owner?.entry ?? null, owner?.runId ?? null],
      );
    } catch (err) {
      if (owner === undefined || !isUniqueViolation(err)) throw err;
      const held = await this.db.query<{ id: string; run_id: string | null }>(
        "SELECT id, run_id FROM github.sync WHERE entry = $1 AND status = 'running'",
        [owner.entry],
      );
      throw new SyncActiveError(owner.entry, held[0]?.id ?? null, held[0]?.run_id ?? null);
    }
    return id;
  }

  /** Records which run of the agent owns the sync. */
  async attachRun(syncId: string, runId: string): Promise<void> {
    await this.db.query('UPDATE github.sync SET run_id = $2 WHERE id = $1', [syncId, runId]);
  }

  /** The sync an agent's run owns, if it has one yet. */
  async syncOfRun(runId: string): Promise<SyncRow | null> {
    const rows = await this.db.query<RawSync>('SELECT * FROM github.sync WHERE run_id = $1 ORDER BY started_at DESC LIMIT 1', [runId]);
    return rows.length > 0 ? toSync(rows[0]) : null;
  }

  async getSync(id: string): Promise<SyncRow | null> {
    const rows = await this.db.query<RawSync>('SELECT * FROM github.sync WHERE id = $1', [id]);
    return rows.length > 0 ? toSync(rows[0]) : null;
  }

  /** The newest sync, or the newest one still running (hibernating included). */
  async latestSync(onlyRunning = false): Promise<SyncRow | null> {
    const rows = await this.db.query<RawSync>(
      `SELECT * FROM github.sync ${onlyRunning ? "WHERE status = 'running'" : ''} ORDER BY started_at DESC, id DESC LIMIT 1`,
    );
    return rows.length > 0 ? toSync(rows[0]) : null;
  }

  /** The requests and hibernations of every sync stored, read in one statement (the metrics' counters start from it). */
  async totals(): Promise<SyncTotals> {
    const rows = await this.db.query<{ id: string; core: number; graphql: number; hibernations: number }>(
      'SELECT id, requests_core AS core, requests_graphql AS graphql, hibernations FROM github.sync ORDER BY started_at DESC, id DESC',
    );
    const totals: SyncTotals = { requests: { core: 0, graphql: 0 }, hibernations: 0, syncs: [] };
    for (const r of rows) {
      const sync = { id: r.id, requests: { core: Number(r.core), graphql: Number(r.graphql) }, hibernations: Number(r.hibernations) };
      totals.requests.core += sync.requests.core;
      totals.requests.graphql += sync.requests.graphql;
      totals.hibernations += sync.hibernations;
      totals.syncs.push(sync);
    }
    return totals;
  }

  async increment(syncId: string, deltas: Partial<Counters>, runner: SqlRunner = this.db): Promise<void> {
    await runner.query(INCREMENT, [syncId, ...COUNTERS.map((c) => deltas[c] ?? 0), this.now()]);
  }

  async saveQuota(syncId: string, quota: Partial<Record<Budget, QuotaSnapshot>>): Promise<void> {
    await this.db.query('UPDATE github.sync SET quota = $2 WHERE id = $1', [syncId, JSON.stringify(quota)]);
  }

  /** The sync stays running; it sleeps nowhere: the wake-up time is data for whoever schedules it. */
  async hibernate(syncId: string, until: number, budget: Budget, secondaryBackoff: boolean): Promise<void> {
    await this.db.transaction(async (tx) => {
      await tx.query(
        `UPDATE github.sync SET hibernating_until = $2, budget = $3,
        secondary_backoffs = CASE WHEN $4 = 1 THEN secondary_backoffs + 1 ELSE 0 END WHERE id = $1 AND status = 'running'`,
        [syncId, until, budget, secondaryBackoff ? 1 : 0],
      );
      await this.increment(syncId, { hibernations: 1 }, tx);
    });
  }

  async wake(syncId: string): Promise<void> {
    await this.db.query(
      "UPDATE github.sync SET hibernating_until = NULL, budget = NULL, progress_at = $2 WHERE id = $1 AND status = 'running'",
      [syncId, this.now()],
    );
  }

  async finish(syncId: string, status: Exclude<SyncStatus, 'running'>, reason: string | null): Promise<void> {
    await this.db.query(
      `UPDATE github.sync SET status = $2, reason = $3, finished_at = $4, hibernating_until = NULL, budget = NULL
      WHERE id = $1 AND status = 'running'`,
      [syncId, status, reason, this.now()],
    );
  }

  async checkpoints(syncId: string): Promise<CheckpointRow[]> {
    return this.db.query<CheckpointRow>(
      'SELECT repo, stage, state, cursor, reason FROM github.checkpoint WHERE sync_id = $1 ORDER BY repo, stage',
      [syncId],
    );
  }

  async markStage(syncId: string, repo: string, stage: Stage, state: 'done' | 'not-reached', reason: string | null): Promise<void> {
    if (state === 'done') {
      await this.saveCheckpoint(this.db, syncId, repo, stage, state, null, reason);
      return;
    }
    // Not reached keeps its cursor: the next leg continues after the last page stored.
    await this.db.query(
      `INSERT INTO github.checkpoint (sync_id, repo, stage, state, cursor, reason, updated_at) VALUES ($1, $2, $3, $4, NULL, $5, $6)
      ON CONFLICT (sync_id, repo, stage) DO UPDATE SET state = excluded.state, reason = excluded.reason, updated_at = excluded.updated_at`,
      [syncId, repo, stage, state, reason, this.now()],
    );
  }

  /**
   * A page of pull requests, the cursor to continue from and the counters, in one transaction: a
   * resume continues after the last page stored and never asks for it again. `extra` carries counters
   * gathered since the last write (requests made and saved), added in the same increment.
   */
  async upsertPullRequests(
    syncId: string,
    repo: string,
    records: PullRequestRecord[],
    nextCursor: string | null,
    extra: Partial<Counters> = {},
  ): Promise<number> {
    return this.writePage(syncId, repo, 'changes', 'pull_request', records, nextCursor, extra);
  }

  async upsertWorkflowRuns(
    syncId: string,
    repo: string,
    records: WorkflowRunRecord[],
    nextCursor: string | null,
    extra: Partial<Counters> = {},
  ): Promise<number> {
    return this.writePage(syncId, repo, 'checks', 'workflow_run', records, nextCursor, extra);
  }

  /** A run's jobs and the mark that they are stored, in one transaction: a resume trusts the mark. */
  async storeJobs(
    syncId: string,
    runId: number,
    records: WorkflowJobRecord[],
    extra: Partial<Counters> = {},
    // A 304 brings no records: whether the stored ones are all completed is the caller's to say.
    allCompleted = records.every((j) => j.status === 'completed'),
  ): Promise<number> {
    const complete = allCompleted ? 1 : 0;
    if (this.db.dialect === 'postgres') {
      // One statement (atomic by itself): a round trip per run instead of five, on the hot path.
      const rows = await this.db.query<{ created: number }>(
        `WITH up AS (${upsertSql('workflow_job', 'postgres')}),
        mark AS (${MARK_JOBS('$3', '$4', '$2', '$9')})
        ${pgCountUp('$3', '$5', '$6', '$7', '$8', '$10')} WHERE id = $2 RETURNING (SELECT count(*) FROM up WHERE created)::int AS created`,
        [
          JSON.stringify(records),
          syncId,
          this.now(),
          runId,
          extra.requests_made ?? 0,
          extra.requests_saved ?? 0,
          extra.requests_core ?? 0,
          extra.requests_graphql ?? 0,
          complete,
          extra.requests_not_modified ?? 0,
        ],
      );
      return Number(rows[0]?.created ?? 0);
    }
    return this.db.transaction(async (tx) => {
      const created = await this.upsert(tx, 'workflow_job', records, [syncId]);
      await tx.query(MARK_JOBS('$1', '$2', '$3', '$4'), [this.now(), runId, syncId, complete]);
      await this.increment(syncId, { ...extra, records_collected: records.length, records_created: created }, tx);
      return created;
    });
  }

  /** The repository's runs, each with whether its jobs are already stored (by any sync). */
  async runsOf(repo: string): Promise<Array<{ id: number; jobsStored: boolean }>> {
    const rows = await this.db.query<{ id: number; stored: number | null }>(
      'SELECT id, jobs_stored_at AS stored FROM github.workflow_run WHERE repo = $1 ORDER BY id',
      [repo],
    );
    return rows.map((r) => ({ id: Number(r.id), jobsStored: r.stored !== null }));
  }

  /**
   * Running syncs that a leg works on (it said so within `aliveWithinMs`) without progress for longer
   * than `stuckAfterMs` become failed (reason `stuck-no-progress`). Progress is measured only while a
   * leg works: a leg's start moves `progress_at` (legBegins), and a sync that hibernates, waits for a
   * slot or for its storage, or whose agent is gone has no leg saying it works, so it is never touched.
   */
  async reconcileStuck(stuckAfterMs: number, aliveWithinMs = SYNC_ALIVE_WITHIN_MS): Promise<string[]> {
    const now = this.now();
    const rows = await this.db.query<{ id: string }>(
      `UPDATE github.sync SET status = 'failed', reason = 'stuck-no-progress', finished_at = $1
      WHERE status = 'running' AND hibernating_until IS NULL AND alive_at IS NOT NULL AND alive_at >= $3 AND progress_at < $2 RETURNING id`,
      [now, now - stuckAfterMs, now - aliveWithinMs],
    );
    return rows.map((r) => r.id);
  }

  /** A leg starts working on the sync: its progress is measured from now (the time before was not work). */
  async legBegins(syncId: string): Promise<void> {
    await this.db.query("UPDATE github.sync SET alive_at = $2, progress_at = $2 WHERE id = $1 AND status = 'running'", [
      syncId,
      this.now(),
    ]);
  }

  /** The leg still works on the sync (the agent's heartbeat). */
  async legAlive(syncId: string): Promise<void> {
    await this.db.query("UPDATE github.sync SET alive_at = $2 WHERE id = $1 AND status = 'running'", [syncId, this.now()]);
  }

  /** No leg works on the sync any more (it hibernates, waits, or ended). */
  async legEnds(syncId: string): Promise<void> {
    await this.db.query('UPDATE github.sync SET alive_at = NULL WHERE id = $1', [syncId]);
  }

  /**
   * Running syncs whose run has ended (`ended` says which have): failed with `reason`. A sync row is
   * never left running without a run that will resume it.
   */
  async reconcileOrphans(ended: (runId: string) => boolean, reason: string): Promise<string[]> {
    const rows = await this.db.query<{ id: string; run_id: string }>(
      "SELECT id, run_id FROM github.sync WHERE status = 'running' AND run_id IS NOT NULL",
    );
    const orphans = rows.filter((r) => ended(r.run_id)).map((r) => r.id);
    for (const id of orphans) await this.finish(id, 'failed', reason);
    return orphans;
  }

  private async writePage(
    syncId: string,
    repo: string,
    stage: Stage,
    entity: EntityName,
    records: object[],
    nextCursor: string | null,
    extra: Partial<Counters>,
  ): Promise<number> {
    if (this.db.dialect === 'postgres') {
      const rows = await this.db.query<{ created: number }>(
        `WITH up AS (${upsertSql(entity, 'postgres')}),
        cp AS (INSERT INTO github.checkpoint (sync_id, repo, stage, state, cursor, reason, updated_at) VALUES ($2, $3, $4, 'in-progress', $5, NULL, $6)
          ON CONFLICT (sync_id, repo, stage) DO UPDATE SET state = excluded.state, cursor = excluded.cursor, reason = NULL, updated_at = excluded.updated_at)
        ${pgCountUp('$6', '$7', '$8', '$9', '$10', '$11')} WHERE id = $2 RETURNING (SELECT count(*) FROM up WHERE created)::int AS created`,
        [
          JSON.stringify(records),
          syncId,
          repo,
          stage,
          nextCursor,
          this.now(),
          extra.requests_made ?? 0,
          extra.requests_saved ?? 0,
          extra.requests_core ?? 0,
          extra.requests_graphql ?? 0,
          extra.requests_not_modified ?? 0,
        ],
      );
      return Number(rows[0]?.created ?? 0);
    }
    return this.db.transaction(async (tx) => {
      const created = await this.upsert(tx, entity, records, [syncId, repo]);
      await this.saveCheckpoint(tx, syncId, repo, stage, 'in-progress', nextCursor, null);
      await this.increment(syncId, { ...extra, records_collected: records.length, records_created: created }, tx);
      return created;
    });
  }

  private async upsert(tx: SqlRunner, entity: EntityName, records: object[], params: Array<string>): Promise<number> {
    if (records.length === 0) return 0;
    const json = JSON.stringify(records);
    if (tx.dialect === 'postgres') {
      const rows = await tx.query<{ created: boolean }>(upsertSql(entity, 'postgres'), [json, ...params]);
      return rows.filter((r) => r.created).length;
    }
    const existing = await tx.query<{ n: number }>(existingSql(entity), [json]);
    await tx.query(upsertSql(entity, 'sqlite'), [json, ...params]);
    return records.length - Number(existing[0]?.n ?? 0);
  }

  private async saveCheckpoint(
    runner: SqlRunner,
    syncId: string,
    repo: string,
    stage: Stage,
    state: CheckpointRow['state'],
    cursor: string | null,
    reason: string | null,
  ): Promise<void> {
    await runner.query(
      `INSERT INTO github.checkpoint (sync_id, repo, stage, state, cursor, reason, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7)
      ON CONFLICT (sync_id, repo, stage) DO UPDATE SET state = excluded.state, cursor = excluded.cursor, reason = excluded.reason, updated_at = excluded.updated_at`,
      [syncId, repo, stage, state, cursor, reason, this.now()],
    );
  }
}

interface RawSync extends Counters {
  full_load?: number | null;
  id: string;
  status: SyncStatus;
  reason: string | null;
  repos: string;
  secondary_backoffs: number;
  started_at: number;
  finished_at: number | null;
  progress_at: number;
  hibernating_until: number | null;
  budget: Budget | null;
  quota: string | null;
  run_id?: string | null;
}

function toSync(r: RawSync): SyncRow {
  const num = (v: number | null) => (v === null ? null : Number(v));
  return {
    id: r.id,
    runId: r.run_id ?? null,
    status: r.status,
    reason: r.reason,
    repos: JSON.parse(r.repos) as string[],
    records_collected: Number(r.records_collected),
    records_created: Number(r.records_created),
    requests_made: Number(r.requests_made),
    requests_saved: Number(r.requests_saved),
    hibernations: Number(r.hibernations),
    requests_core: Number(r.requests_core ?? 0),
    requests_graphql: Number(r.requests_graphql ?? 0),
    requests_not_modified: Number(r.requests_not_modified ?? 0),
    full: Number(r.full_load ?? 0) === 1,
    secondaryBackoffs: Number(r.secondary_backoffs),
    startedAt: Number(r.started_at),
    finishedAt: num(r.finished_at),
    progressAt: Number(r.progress_at),
    hibernatingUntil: num(r.hibernating_until),
    budget: r.budget,
    quota: r.quota === null ? {} : (JSON.parse(r.quota) as SyncRow['quota']),
  };
}
