import type { Budget } from './store/githubStore';

/** How a rate limit showed itself; `preventive` is our own pause before GitHub had to refuse. */
export type RateLimitKind = 'primary' | 'secondary' | 'graphql' | 'preventive';

/**
 * The stage must stop: the budget gives no more until `until` (this machine's clock, ms, already
 * corrected for the server's clock). Never a failure of the repository that met it.
 */
export class RateLimitedError extends Error {
  /** `claimedUntil`: the wake-up time the answer gave when it was too far ahead to believe (until is then the bound). */
  constructor(
    readonly budget: Budget,
    readonly until: number,
    readonly kind: RateLimitKind,
    readonly secondaryBackoff = false,
    readonly claimedUntil: number | null = null,
  ) {
    super(`${budget} budget rate-limited (${kind}) until ${new Date(until).toISOString()}`);
    this.name = 'RateLimitedError';
  }
}

/** A secondary limit without retry-after: at least 60 s, doubling with each one met in a row. */
export function secondaryBackoffMs(streak: number): number {
  return 60_000 * 2 ** Math.min(Math.max(0, streak), 6);
}
