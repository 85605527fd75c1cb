import type { Logger } from '../log/logger';
import { runBounded } from './boundedTasks';
import { BudgetTracker } from './budgetTracker';
import { GITHUB_SYNC_CONCURRENCY, GITHUB_TASK_TIMEOUT_MS, validateConcurrency } from './concurrency';
import { GithubClient, withTaskSignal, type GithubClientConfig } from './githubClient';
import { githubSyncStatus, type GithubSyncStatus } from './githubSyncStatus';
import { notReachedReason } from './notReachedReason';
import { PendingCounters } from './pendingCounters';
import { RateLimitedError, type RateLimitKind } from './rateLimited';
import { STAGE_WORK } from './stages';
import { SyncTimeoutError } from './syncTimeoutError';
import { UnauthorizedError } from './unauthorizedError';
import { STAGES, type Budget, type GithubStore } from './store/githubStore';
import { isStorageLost, keepStorageLoss, storageLossCause, type StorageLossCause } from './store/storageLost';

/**
 * The seam between the sync and whoever runs it (the CLI today, the agent's run lifecycle later).
 * `repos` starts a new sync; `resume` continues a running (hibernated) one. The caller owns time: a
 * `hibernate` outcome is a wake-up time to schedule, not something this function waits for.
 */
export interface GithubSyncContext {
  store: GithubStore;
  client: GithubClientConfig;
  repos?: readonly string[];
  resume?: string;
  /** Aborting it cancels the sync: requests are aborted, the row ends `cancelled` (`failed`, timeout, for a SyncTimeoutError). */
  signal?: AbortSignal;
  onProgress?: (status: GithubSyncStatus) => void;
  concurrency?: number;
  taskTimeoutMs?: number;
  /** Reuse one tracker across the legs of a sync: it keeps the server-clock estimate. */
  budgets?: BudgetTracker;
  logger?: Logger;
}

export type GithubSyncOutcome =
  | { kind: 'completed'; syncId: string; summary: GithubSyncStatus }
  | { kind: 'hibernate'; syncId: string; until: number; budget: Budget; reason: RateLimitKind }
  | { kind: 'failed'; syncId: string | null; reason: string }
  /** The storage went away (restart, outage, full disk): the row is as the last write left it; resume once it is back. */
  | { kind: 'storage-lost'; syncId: string | null; cause: StorageLossCause; message: string };

/** At most one progress report (status queries and a change event) per this many ms. */
const PROGRESS_MS = 250;

/** One leg of a sync: runs the stages until the sync completes, hibernates, is cancelled or fails. */

export async function runGithubSync(ctx: GithubSyncContext): Promise<GithubSyncOutcome> {
  const { store } = ctx;
  const concurrency = ctx.concurrency ?? GITHUB_SYNC_CONCURRENCY;
  validateConcurrency(concurrency, store.db.poolSize, store.db.dialect);
  let syncId: string;
  if (ctx.resume !== undefined) {
    const row = await store.getSync(ctx.resume);
    if (row === null) return { kind: 'failed', syncId: null, reason: 'unknown-sync' };
    if (row.status !== 'running') return { kind: 'failed', syncId: row.id, reason: `sync-${row.status}` };
    syncId = row.id;
    await store.wake(syncId);
  } else {
    if (ctx.repos === undefined || ctx.repos.length === 0) return { kind: 'failed', syncId: null, reason: 'no-repositories' };
    syncId = await store.createSync(ctx.repos);
  }
  const row = (await store.getSync(syncId))!;
  const budgets = ctx.budgets ?? new BudgetTracker();
  budgets.secondaryStreak = row.secondaryBackoffs;
  const pending = new PendingCounters();
  const client = new GithubClient(ctx.client, budgets, (budget) => pending.requestMade(budget));
  let quotaSavedAt = 0;
  let reportedAt = 0;
  const progress = async (force = false) => {
    // The quota is for the status: once a second is enough (and keeps the database off the hot path).
    if (force || Date.now() - quotaSavedAt >= 1000) {
      quotaSavedAt = Date.now();
      await store.saveQuota(syncId, budgets.snapshot());
    }
    // The status costs queries, and each report is a change event to every client: at most one per
    // PROGRESS_MS, so a fast sync does not crowd the agent's event loop (status answers wait behind it).
    if (ctx.onProgress && (force || Date.now() - reportedAt >= PROGRESS_MS)) {
      reportedAt = Date.now();
      const status = await githubSyncStatus(store, syncId);
      if (status) ctx.onProgress(status);
    }
  };

  try {
    for (const stage of STAGES) {
      const checkpoints = new Map((await store.checkpoints(syncId)).filter((c) => c.stage === stage).map((c) => [c.repo, c]));
      const todo = row.repos.filter((repo) => checkpoints.get(repo)?.state !== 'done');
      let stop: RateLimitedError | null = null;
      let unauthorized = false;
      let lost: Error | null = null;
      await runBounded(
        todo,
        {
          concurrency,
          timeoutMs: ctx.taskTimeoutMs ?? GITHUB_TASK_TIMEOUT_MS,
          mayStart: () => stop === null && !unauthorized && lost === null,
          signal: ctx.signal,
        },
        (repo, signal) =>
          withTaskSignal(signal, () =>
            STAGE_WORK[stage]({ store, client, syncId, pending, checkpoint: checkpoints.get(repo) }, repo, signal),
          ),
        keepStorageLoss(
          async (repo, outcome) => {
            if (outcome.kind === 'done') {
              await store.markStage(syncId, repo, stage, 'done', null);
            } else if (outcome.kind === 'failed') {
              // Rate limited: no checkpoint, the resume redoes it. Cancelled: nothing to record either.
              if (outcome.error instanceof RateLimitedError) {
                if (stop === null || outcome.error.until > stop.until) stop = outcome.error;
                return;
              }
              // The token is refused: every other request would be too; the sync stops, no checkpoint.
              if (outcome.error instanceof UnauthorizedError) {
                unauthorized = true;
                return;
              }
              // The storage is gone, not the repository: no mark (none could be written), the resume redoes it.
              if (isStorageLost(outcome.error)) {
                lost ??= outcome.error as Error;
                return;
              }
              if (ctx.signal?.aborted === true) return;
              const reason = notReachedReason(outcome.error, outcome.timedOut);
              ctx.logger?.warn(
                { syncId, repo, stage, reason, err: outcome.error instanceof Error ? outcome.error.message : String(outcome.error) },
                'repository stage not reached',
              );
              await store.markStage(syncId, repo, stage, 'not-reached', reason);
            } else {
              return;
            }
            await progress();
          },
          (err) => {
            lost ??= err;
          },
        ),
      );
      // Set in the handlers: TypeScript cannot see the assignment there.
      const lostError = lost as Error | null;
      if (lostError !== null) throw lostError;
      await store.increment(syncId, pending.take());
      if (ctx.signal?.aborted === true) {
        const timedOut = ctx.signal.reason instanceof SyncTimeoutError;
        await store.finish(syncId, timedOut ? 'failed' : 'cancelled', timedOut ? 'timeout' : 'cancelled');
        return { kind: 'failed', syncId, reason: timedOut ? 'timeout' : 'cancelled' };
      }
      if (unauthorized) {
        ctx.logger?.error({ syncId, stage }, 'the GitHub API refused the token (401): sync failed');
        await store.finish(syncId, 'failed', 'unauthorized');
        return { kind: 'failed', syncId, reason: 'unauthorized' };
      }
      const limit = stop as RateLimitedError | null;
      if (limit !== null) {
        if (limit.claimedUntil !== null) {
          ctx.logger?.warn(
            { syncId, stage, budget: limit.budget, claimedUntil: new Date(limit.claimedUntil).toISOString() },
            'a rate-limit reset beyond the next hour: malformed, the wait is cut',
          );
        }
        await store.saveQuota(syncId, budgets.snapshot());
        await store.hibernate(syncId, limit.until, limit.budget, limit.secondaryBackoff);
        ctx.logger?.info(
          { syncId, stage, until: new Date(limit.until).toISOString(), budget: limit.budget, kind: limit.kind },
          'github sync hibernating',
        );
        return { kind: 'hibernate', syncId, until: limit.until, budget: limit.budget, reason: limit.kind };
      }
    }
    await store.finish(syncId, 'completed', null);
    await progress(true);
    return { kind: 'completed', syncId, summary: (await githubSyncStatus(store, syncId))! };
  } catch (err) {
    const cause = storageLossCause(err);
    if (cause !== null) {
      // Nothing more can be written now; the row stays running and its checkpoints say what is left.
      ctx.logger?.warn({ syncId, cause, err: (err as Error).message }, 'github sync storage lost; the leg stops to wait for it');
      await store.increment(syncId, pending.take()).catch(() => {});
      return { kind: 'storage-lost', syncId, cause, message: (err as Error).message };
    }
    // Only the database can get here (tasks' errors are outcomes): the sync cannot record its work.
    ctx.logger?.error({ syncId, err: err instanceof Error ? err.message : String(err) }, 'github sync failed');
    await store.increment(syncId, pending.take()).catch(() => {});
    await store.finish(syncId, 'failed', 'storage-error').catch(() => {});
    return { kind: 'failed', syncId, reason: 'storage-error' };
  }
}
