import type { Logger } from '../log/logger';
import type { BudgetTracker } from './budgetTracker';
import type { RateLimitedError, RateLimitKind } from './rateLimited';
import type { Budget, GithubStore, Stage } from './store/githubStore';

/**
 * No stage can proceed: the sync hibernates until the earliest time one of them can go on (the
 * other stages find their own limits again on the wake-up, from the budget tracker or GitHub's first
 * answer). A limit whose reset was too far ahead to believe is logged as malformed here, once.
 */
export async function hibernateBlocked(
  ctx: { store: GithubStore; logger?: Logger },
  syncId: string,
  budgets: BudgetTracker,
  blocked: ReadonlyMap<Stage, RateLimitedError>,
): Promise<{ kind: 'hibernate'; syncId: string; until: number; budget: Budget; reason: RateLimitKind }> {
  let limit: RateLimitedError | null = null;
  for (const [stage, error] of blocked) {
    if (error.claimedUntil !== null) {
      ctx.logger?.warn(
        { syncId, stage, budget: error.budget, claimedUntil: new Date(error.claimedUntil).toISOString() },
        'a rate-limit reset beyond the next hour: malformed, the wait is cut',
      );
    }
    if (limit === null || error.until < limit.until) limit = error;
  }
  if (limit === null) throw new Error('hibernateBlocked: no stage is blocked');
  await ctx.store.saveQuota(syncId, budgets.snapshot());
  await ctx.store.hibernate(syncId, limit.until, limit.budget, limit.secondaryBackoff);
  ctx.logger?.info(
    {
      syncId,
      stages: [...blocked.keys()],
      until: new Date(limit.until).toISOString(),
      budget: limit.budget,
      kind: limit.kind,
    },
    'github sync hibernating',
  );
  return { kind: 'hibernate', syncId, until: limit.until, budget: limit.budget, reason: limit.kind };
}
