import type { GithubClient } from './githubClient';
import type { PendingCounters } from './pendingCounters';
import type { CheckpointRow, GithubStore, Stage } from './store/githubStore';

/** What one repository's stage works with. */
export interface StageContext {
  store: GithubStore;
  client: GithubClient;
  syncId: string;
  pending: PendingCounters;
  /** The repository's checkpoint row for this stage from an earlier leg, if any. */
  checkpoint: CheckpointRow | undefined;
}

/** The checks stage's cursor once every page of runs is stored: what is left is jobs. */
const JOBS_PHASE = 'jobs';
const RUNS_PREFIX = 'runs:';

/** Changes: the repository's pull requests through GraphQL, page by page from the stored cursor. */
export async function syncChanges(c: StageContext, repo: string, signal: AbortSignal): Promise<void> {
  const cursor = c.checkpoint?.state === 'in-progress' ? c.checkpoint.cursor : null;
  for await (const page of c.client.pullRequestPages(repo, cursor, signal)) {
    await c.store.upsertPullRequests(c.syncId, repo, page.records, page.endCursor, c.pending.take());
  }
}

/**
 * Checks: the repository's workflow runs through REST (`Link` pages, the next URL stored with each
 * page), then the jobs of each run whose jobs are not stored yet. A run whose jobs are stored costs no
 * request: that is a request saved (ADR 0006 item 5, step 4).
 */
export async function syncChecks(c: StageContext, repo: string, signal: AbortSignal): Promise<void> {
  const cursor = c.checkpoint?.state === 'in-progress' ? c.checkpoint.cursor : null;
  if (cursor !== JOBS_PHASE) {
    const from = cursor !== null && cursor.startsWith(RUNS_PREFIX) ? cursor.slice(RUNS_PREFIX.length) : null;
    for await (const page of c.client.workflowRunPages(repo, from, signal)) {
      await c.store.upsertWorkflowRuns(
        c.syncId,
        repo,
        page.records,
        page.nextUrl !== null ? `${RUNS_PREFIX}${page.nextUrl}` : JOBS_PHASE,
        c.pending.take(),
      );
    }
  }
  for (const run of await c.store.runsOf(repo)) {
    signal.throwIfAborted();
    if (run.jobsStored) {
      c.pending.requestSaved();
      continue;
    }
    const jobs = await c.client.jobs(repo, run.id, signal);
    await c.store.storeJobs(c.syncId, run.id, jobs, c.pending.take());
  }
}

export const STAGE_WORK: Record<Stage, (c: StageContext, repo: string, signal: AbortSignal) => Promise<void>> = {
  changes: syncChanges,
  checks: syncChecks,
};
