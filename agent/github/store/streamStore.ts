import { repoPath } from '../repoPath';
import type { GithubDb } from './githubDb';

export type Stream = 'pull_requests' | 'workflow_runs';

/** Where a repository's stream stands across syncs. */
export interface StreamState {
  /** The newest change stored by a completed stage (PRs: updatedAt; runs: created_at); null before. */
  highWater: string | null;
  /** Where an unfinished full load stopped (the checkpoint cursor of a stage not reached). */
  cursor: string | null;
  /** Where the recent-runs listing starts (its `created` filter), while it stays within its slack. */
  windowFrom: string | null;
}

/** A REST answer's validator, with what a 304 does not repeat: its next page and its total. */
export interface StoredEtag {
  etag: string;
  nextPath: string | null;
  totalCount: number | null;
}

/** A run and whether its stored jobs are still what GitHub would answer. */
export interface RunJobsState {
  id: number;
  fresh: boolean;
}

/**
 * The state of the sync that outlives one sync: cursors per repository and stream, ETags per URL, and
 * which runs' jobs or statuses must be read again. Statements are the same on both engines.
 */
export class StreamStore {
  constructor(
    private readonly db: GithubDb,
    private readonly now: () => number = Date.now,
  ) {}

  async state(repo: string, stream: Stream): Promise<StreamState | null> {
    const rows = await this.db.query<{ high_water: string | null; cursor: string | null; window_from: string | null }>(
      'SELECT high_water, cursor, window_from FROM github.stream_state WHERE repo = $1 AND stream = $2',
      [repo, stream],
    );
    return rows.length === 0 ? null : { highWater: rows[0].high_water, cursor: rows[0].cursor, windowFrom: rows[0].window_from };
  }

  /** The start of the recent-runs listing the next syncs use (a stream that has a high-water mark). */
  async keepWindow(repo: string, stream: Stream, from: string): Promise<void> {
    await this.db.query('UPDATE github.stream_state SET window_from = $3 WHERE repo = $1 AND stream = $2', [repo, stream, from]);
  }

  /** A completed stage: the high-water mark is the newest stored change; no full load is left. */
  async complete(syncId: string, repo: string, stream: Stream): Promise<void> {
    const newest =
      stream === 'pull_requests'
        ? 'SELECT max(updated_at) AS hw FROM github.pull_request WHERE repo = $1'
        : 'SELECT max(created_at) AS hw FROM github.workflow_run WHERE repo = $1';
    const hw = (await this.db.query<{ hw: string | null }>(newest, [repo]))[0]?.hw ?? null;
    await this.save(syncId, repo, stream, hw, null, true);
  }

  /** A stage not reached in a full load: the next sync continues from `cursor` (the high water is kept). */
  async keepCursor(syncId: string, repo: string, stream: Stream, cursor: string | null): Promise<void> {
    await this.save(syncId, repo, stream, null, cursor, false);
  }

  private async save(syncId: string, repo: string, stream: Stream, hw: string | null, cursor: string | null, done: boolean): Promise<void> {
    await this.db.query(
      `INSERT INTO github.stream_state (repo, stream, high_water, cursor, sync_id, updated_at) VALUES ($1, $2, $3, $4, $5, $6)
      ON CONFLICT (repo, stream) DO UPDATE SET ${done ? 'high_water = excluded.high_water, ' : ''}cursor = excluded.cursor,
        sync_id = excluded.sync_id, updated_at = excluded.updated_at`,
      [repo, stream, hw, cursor, syncId, this.now()],
    );
  }

  /**
   * A full load again (`github sync --full`): the streams' cursors, the ETags and the jobs' freshness of
   * these repositories (null: of every repository) forgotten, in one transaction.
   */
  async forget(repos: readonly string[] | null): Promise<void> {
    await this.db.transaction(async (tx) => {
      // Stored jobs count as stale too: a full load asks for every run's jobs again.
      if (repos === null) {
        await tx.query('DELETE FROM github.stream_state');
        await tx.query('DELETE FROM github.etag');
        await tx.query('UPDATE github.workflow_run SET jobs_completed = 0');
        return;
      }
      for (const repo of repos) {
        const prefix = `${repoPath(repo)}/`;
        await tx.query('DELETE FROM github.stream_state WHERE repo = $1', [repo]);
        await tx.query('UPDATE github.workflow_run SET jobs_completed = 0 WHERE repo = $1', [repo]);
        await tx.query('DELETE FROM github.etag WHERE path >= $1 AND path < $2', [prefix, `${prefix}\uffff`]);
      }
    });
  }

  /** Every stored ETag whose path starts with `prefix` (one repository's REST answers). */
  async etags(prefix: string): Promise<Map<string, StoredEtag>> {
    const rows = await this.db.query<{ path: string; etag: string; next_path: string | null; total_count: number | null }>(
      'SELECT path, etag, next_path, total_count FROM github.etag WHERE path >= $1 AND path < $2',
      [prefix, `${prefix}\uffff`],
    );
    return new Map(
      rows.map((r) => [r.path, { etag: r.etag, nextPath: r.next_path, totalCount: r.total_count === null ? null : Number(r.total_count) }]),
    );
  }

  /** Saved only after the answer's records are stored: a validator never stands for records not kept. */
  async saveEtag(path: string, e: StoredEtag): Promise<void> {
    await this.db.query(
      `INSERT INTO github.etag (path, etag, next_path, total_count, updated_at) VALUES ($1, $2, $3, $4, $5)
      ON CONFLICT (path) DO UPDATE SET etag = excluded.etag, next_path = excluded.next_path, total_count = excluded.total_count,
        updated_at = excluded.updated_at`,
      [path, e.etag, e.nextPath, e.totalCount, this.now()],
    );
  }

  /**
   * The repository's runs, each with whether its stored jobs need no request: stored by this sync, or
   * stored complete for the run's current attempt and update.
   */
  async runsJobs(repo: string, syncId: string): Promise<RunJobsState[]> {
    const rows = await this.db.query<{ id: number; fresh: number }>(
      `SELECT id, CASE WHEN jobs_stored_at IS NOT NULL AND (jobs_sync_id = $2 OR (jobs_completed = 1
        AND jobs_run_attempt = run_attempt AND jobs_run_updated_at = updated_at)) THEN 1 ELSE 0 END AS fresh
      FROM github.workflow_run WHERE repo = $1 ORDER BY id`,
      [repo, syncId],
    );
    return rows.map((r) => ({ id: Number(r.id), fresh: Number(r.fresh) === 1 }));
  }

  /** Whether every stored job of the run is completed. */
  async jobsComplete(runId: number): Promise<boolean> {
    const rows = await this.db.query<{ n: number }>(
      "SELECT count(*) AS n FROM github.workflow_job WHERE run_id = $1 AND status <> 'completed'",
      [runId],
    );
    return Number(rows[0]?.n ?? 0) === 0;
  }

  /** Runs not completed when last read and not read by this sync: read again by id until they are. */
  async unfinishedRuns(repo: string, syncId: string): Promise<number[]> {
    const rows = await this.db.query<{ id: number }>(
      "SELECT id FROM github.workflow_run WHERE repo = $1 AND (status IS NULL OR status <> 'completed') AND sync_id <> $2 ORDER BY id",
      [repo, syncId],
    );
    return rows.map((r) => Number(r.id));
  }
}
