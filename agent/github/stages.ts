import { syncFreshJobs } from './freshJobs';
import { syncRecentRuns } from './recentRuns';
import type { StageContext } from './stageContext';
import type { Stage } from './store/githubStore';
import type { Stream } from './store/streamStore';

/** The checks stage's cursor once every page of runs is stored: what is left is jobs. */
const JOBS_PHASE = 'jobs';
const RUNS_PREFIX = 'runs:';
/** Pull requests changed this long before the high-water mark are read again (clocks, equal times). */
export const PULL_REQUEST_OVERLAP_MS = 60_000;

/** Where this leg starts: the sync's own checkpoint (in progress or not reached), else a full load left unfinished. */
async function startOf(c: StageContext, repo: string, stream: Stream): Promise<{ cursor: string | null; highWater: string | null }> {
  const state = c.full ? null : await c.streams.state(repo, stream);
  const own = c.checkpoint !== undefined && c.checkpoint.state !== 'done' ? c.checkpoint.cursor : null;
  return { cursor: own ?? (state?.highWater == null ? (state?.cursor ?? null) : null), highWater: state?.highWater ?? null };
}

/**
 * Keeps a full load's cursor for the next sync when the stage stops before its end (not reached,
 * timed out), so that no stored page is asked for again; then lets the error go on.
 */
async function keepingCursor(
  c: StageContext,
  repo: string,
  stream: Stream,
  full: boolean,
  work: (mark: (cursor: string | null) => void) => Promise<void>,
) {
  let last: string | null = null;
  try {
    await work((cursor) => {
      last = cursor;
    });
  } catch (err) {
    if (full && last !== null) await c.streams.keepCursor(c.syncId, repo, stream, last).catch(() => {});
    throw err;
  }
}

/**
 * Changes: the repository's pull requests through GraphQL, newest change first, page by page from the
 * stored cursor; once a high-water mark is known (a completed stage before), it stops at the first
 * page that reaches back before it (less a small overlap).
 */
export async function syncChanges(c: StageContext, repo: string, signal: AbortSignal): Promise<void> {
  const { cursor, highWater } = await startOf(c, repo, 'pull_requests');
  const stopAt = highWater === null ? null : Date.parse(highWater) - PULL_REQUEST_OVERLAP_MS;
  await keepingCursor(c, repo, 'pull_requests', highWater === null, async (mark) => {
    for await (const page of c.client.pullRequestPages(repo, cursor, signal)) {
      await c.store.upsertPullRequests(c.syncId, repo, page.records, page.endCursor, c.pending.take());
      mark(page.endCursor);
      if (stopAt !== null && page.records.some((r) => Date.parse(r.updatedAt) < stopAt)) break;
    }
  });
  await c.streams.complete(c.syncId, repo, 'pull_requests');
}

/**
 * Checks: the repository's workflow runs, then the jobs of each run whose stored jobs are not fresh.
 * The first sync of a repository lists every run (`Link` pages, the next URL stored with each page);
 * a later one lists the runs created within the re-run window and reads unfinished ones by id.
 */
export async function syncChecks(c: StageContext, repo: string, signal: AbortSignal): Promise<void> {
  const { cursor, highWater } = await startOf(c, repo, 'workflow_runs');
  const full = highWater === null;
  await keepingCursor(c, repo, 'workflow_runs', full, async (mark) => {
    if (cursor !== JOBS_PHASE) {
      if (!full) {
        await syncRecentRuns(c, repo, highWater, signal);
        await c.store.upsertWorkflowRuns(c.syncId, repo, [], JOBS_PHASE, c.pending.take());
      } else {
        const from = cursor !== null && cursor.startsWith(RUNS_PREFIX) ? cursor.slice(RUNS_PREFIX.length) : null;
        for await (const page of c.client.workflowRunPages(repo, from, signal)) {
          const next = page.nextUrl !== null ? `${RUNS_PREFIX}${page.nextUrl}` : JOBS_PHASE;
          await c.store.upsertWorkflowRuns(c.syncId, repo, page.records, next, c.pending.take());
          mark(next);
        }
      }
    }
    mark(JOBS_PHASE);
    await syncFreshJobs(c, repo, signal);
  });
  await c.streams.complete(c.syncId, repo, 'workflow_runs');
}

export const STAGE_WORK: Record<Stage, (c: StageContext, repo: string, signal: AbortSignal) => Promise<void>> = {
  changes: syncChanges,
  checks: syncChecks,
};
