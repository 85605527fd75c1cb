import type { Logger } from '../log/logger';
import { BudgetTracker } from './budgetTracker';
import { GITHUB_SYNC_CONCURRENCY, GITHUB_TASK_TIMEOUT_MS, validateConcurrency } from './concurrency';
import { GithubClient, withTaskSignal, type GithubClientConfig } from './githubClient';
import { githubSyncStatus, type GithubSyncStatus } from './githubSyncStatus';
import { hibernateBlocked as hibernate } from './hibernateBlocked';
import { notReachedReason } from './notReachedReason';
import { runParallelStages } from './parallelStages';
import { PendingCounters } from './pendingCounters';
import { RateLimitedError, type RateLimitKind } from './rateLimited';
import { STAGE_WORK } from './stages';
import { SyncTimeoutError } from './syncTimeoutError';
import { UnauthorizedError } from './unauthorizedError';
import { STAGES, type Budget, type GithubStore } from './store/githubStore';
import { isStorageLost, keepStorageLoss, storageLossCause, type StorageLossCause } from './store/storageLost';
import { StreamStore } from './store/streamStore';

/**
 * The seam between the sync and whoever runs it (the CLI today, the agent's run lifecycle later).
 * `repos` starts a new sync; `resume` continues a running (hibernated) one. The caller owns time: a
 * `hibernate` outcome is a wake-up time to schedule, not something this function waits for.
 */
export interface GithubSyncContext {
  store: GithubStore;
  client: GithubClientConfig;
  repos?: readonly string[];
  /** With `repos`: a full load of every repository, whatever their cursors (`github sync --full`). */
  full?: boolean;
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

/**
 * One leg of a sync: runs the stages side by side, each on its own budget, until the sync completes,
 * no stage can proceed (it hibernates), or it is cancelled or fails.
 */
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
    syncId = await store.createSync(ctx.repos, { full: ctx.full === true });
  }
  const row = (await store.getSync(syncId))!;
  const budgets = ctx.budgets ?? new BudgetTracker();
  budgets.secondaryStreak = row.secondaryBackoffs;
  const pending = new PendingCounters();
  const client = new GithubClient(
    ctx.client,
    budgets,
    (budget) => pending.requestMade(budget),
    () => pending.notModifiedAnswer(),
  );
  const streams = new StreamStore(store.db);
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
    const checkpoints = new Map((await store.checkpoints(syncId)).map((c) => [`${c.stage} ${c.repo}`, c]));
    // A repository met by a limit is tried again in this leg when its stage can go on: from its checkpoint as it is then.
    const again = new Set<string>();
    let unauthorized = false;
    let lost: Error | null = null;
    let lastSecondary: RateLimitedError | null = null;
    const blocked = await runParallelStages(
      STAGES.map((stage) => ({ stage, items: row.repos.filter((repo) => checkpoints.get(`${stage} ${repo}`)?.state !== 'done') })),
      {
        concurrency,
        timeoutMs: ctx.taskTimeoutMs ?? GITHUB_TASK_TIMEOUT_MS,
        mayStart: () => !unauthorized && lost === null,
        signal: ctx.signal,
      },
      async (stage, repo, signal) => {
        const key = `${stage} ${repo}`;
        const checkpoint = again.has(key)
          ? (await store.checkpoints(syncId)).find((c) => c.stage === stage && c.repo === repo)
          : checkpoints.get(key);
        await withTaskSignal(signal, () =>
          STAGE_WORK[stage]({ store, streams, client, syncId, pending, checkpoint, full: row.full }, repo, signal),
        );
      },
      (error) => (error instanceof RateLimitedError ? error : null),
      keepStorageLoss(
        async (stage, repo, outcome) => {
          if (outcome.kind === 'done') {
            await store.markStage(syncId, repo, stage, 'done', null);
          } else {
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
            // Cancelled: nothing to record.
            if (ctx.signal?.aborted === true) return;
            const reason = notReachedReason(outcome.error, outcome.timedOut);
            ctx.logger?.warn(
              { syncId, repo, stage, reason, err: outcome.error instanceof Error ? outcome.error.message : String(outcome.error) },
              'repository stage not reached',
            );
            await store.markStage(syncId, repo, stage, 'not-reached', reason);
          }
          await progress();
        },
        (err) => {
          lost ??= err;
        },
      ),
      (stage, repo, block) => {
        again.add(`${stage} ${repo}`);
        // A secondary limit met again in this leg waits twice as long as the last (as across legs).
        if (block.secondaryBackoff && (lastSecondary === null || block.until > lastSecondary.until)) {
          lastSecondary = block;
          budgets.secondaryStreak += 1;
        }
      },
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
      ctx.logger?.error({ syncId }, 'the GitHub API refused the token (401): sync failed');
      await store.finish(syncId, 'failed', 'unauthorized');
      return { kind: 'failed', syncId, reason: 'unauthorized' };
    }
    if (blocked.size > 0) return await hibernate(ctx, syncId, budgets, blocked);
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
