// The types' module, not shared/protocol: the leg worker's bundle stays without the messages' schemas.
import { GITHUB_BUDGETS } from '../../shared/protocolTypes';
import { RateLimitedError, secondaryBackoffMs } from './rateLimited';
import type { Budget, QuotaSnapshot } from './store/githubStore';

type Headers = Record<string, string | number | undefined>;

/**
 * A reset or retry-after further than this is not one GitHub gives (its windows are an hour): it is
 * treated as malformed and the wait is cut to this (which also keeps every timer far below Node's
 * 2^31-1 ms overflow).
 */
export const MAX_RATE_LIMIT_WAIT_MS = 65 * 60_000;

interface BudgetState {
  limit: number;
  remaining: number;
  reset: number;
}

/**
 * What the token has left, per resource (graphql, core), read from every answer's
 * `x-ratelimit-*` headers (200s too) and GraphQL's `rateLimit`, never from a fixed rate. Requests are
 * reserved before they are sent, so five tasks in flight cannot together overspend the last points:
 * below 2 × cost the budget pauses (the ADR's preventive pause). Once a budget is limited, no request
 * on it is sent before its wake-up time.
 *
 * Wake-up times are on this machine's clock: GitHub's reset is on the server's, whose offset is bounded
 * from below by every answer's `Date` header (server time at sending ≥ Date; our clock at receipt ≥ ours
 * at sending). The largest lower bound seen is used, so the wake-up is never before the real reset.
 */
export class BudgetTracker {
  private readonly budgets = new Map<Budget, BudgetState>();
  private readonly blocked = new Map<Budget, RateLimitedError>();
  private skewMs: number | null = null;
  /** Consecutive secondary limits without retry-after (persisted by the sync between legs). */
  secondaryStreak = 0;

  constructor(private readonly now: () => number = Date.now) {}

  /** The server's clock minus ours, as far as the answers prove it (0 until one is seen). */
  get skew(): number {
    return this.skewMs ?? 0;
  }

  toLocal(serverEpochSeconds: number): number {
    return serverEpochSeconds * 1000 - this.skew;
  }

  /** Called before each request; throws RateLimitedError rather than sending one that must fail. */
  reserve(budget: Budget, cost = 1): void {
    const block = this.blocked.get(budget);
    if (block) {
      if (block.until > this.now()) throw block;
      this.blocked.delete(budget);
    }
    const state = this.budgets.get(budget);
    if (!state) return;
    if (this.toLocal(state.reset) <= this.now()) {
      // The window has turned since the last answer; the next answer tells the new figures.
      this.budgets.delete(budget);
      return;
    }
    if (state.remaining < 2 * cost) {
      const error = this.bounded(new RateLimitedError(budget, this.toLocal(state.reset), 'preventive'));
      this.blocked.set(budget, error);
      throw error;
    }
    state.remaining -= cost;
  }

  /** A reserved request that cost nothing (a 304 Not Modified): its point is given back. */
  refund(budget: Budget, cost = 1): void {
    const state = this.budgets.get(budget);
    if (state) state.remaining = Math.min(state.limit, state.remaining + cost);
  }

  /** Reads an answer's headers; returns the resource they were about. */
  observe(headers: Headers, receivedAt = this.now()): Budget | null {
    const date = headers.date;
    if (typeof date === 'string') {
      const server = Date.parse(date);
      if (Number.isFinite(server)) this.skewMs = Math.max(this.skewMs ?? -Infinity, server - receivedAt);
    }
    const resource = headers['x-ratelimit-resource'];
    const budget: Budget | null = resource === 'graphql' ? 'graphql' : resource === 'core' ? 'core' : null;
    const remaining = Number(headers['x-ratelimit-remaining']);
    const limit = Number(headers['x-ratelimit-limit']);
    const reset = Number(headers['x-ratelimit-reset']);
    if (budget === null || !Number.isFinite(remaining) || !Number.isFinite(reset)) return budget;
    const state = this.budgets.get(budget);
    if (!state || reset > state.reset) {
      this.budgets.set(budget, { limit: Number.isFinite(limit) ? limit : remaining, remaining, reset });
    } else if (reset === state.reset) {
      // Answers arrive out of order: within a window the smallest remaining is the truest.
      state.remaining = Math.min(state.remaining, remaining);
    }
    return budget;
  }

  /** GraphQL's own account in the answer body; `cost` is what the next query will likely cost. */
  observeGraphql(rateLimit: { remaining?: unknown; resetAt?: unknown; limit?: unknown }): void {
    const reset = typeof rateLimit.resetAt === 'string' ? Math.round(Date.parse(rateLimit.resetAt) / 1000) : NaN;
    const remaining = Number(rateLimit.remaining);
    if (!Number.isFinite(reset) || !Number.isFinite(remaining)) return;
    this.observe({
      'x-ratelimit-resource': 'graphql',
      'x-ratelimit-remaining': remaining,
      'x-ratelimit-reset': reset,
      'x-ratelimit-limit': Number(rateLimit.limit),
    });
  }

  /** A refused answer: block the budget and return the error the stage stops on. */
  limited(budget: Budget, headers: Headers, kind: 'primary' | 'secondary' | 'graphql'): RateLimitedError {
    const retryAfter = Number(headers['retry-after']);
    let error: RateLimitedError;
    if (Number.isFinite(retryAfter) && retryAfter >= 0) {
      error = new RateLimitedError(budget, this.now() + retryAfter * 1000, kind);
    } else if (
      kind === 'secondary' &&
      String(headers['x-ratelimit-remaining']) === '0' &&
      Number.isFinite(Number(headers['x-ratelimit-reset']))
    ) {
      // GitHub's docs: with remaining 0, not before x-ratelimit-reset.
      error = new RateLimitedError(budget, Math.max(this.now(), this.toLocal(Number(headers['x-ratelimit-reset']))), kind);
    } else if (kind === 'secondary') {
      // A secondary limit is the token's: met by several requests in flight (both stages, several
      // repositories) it is one wait, not one each, and only a limit met after it ends waits longer.
      const active = [...this.blocked.values()].find((b) => b.secondaryBackoff && b.until > this.now());
      error = new RateLimitedError(budget, active?.until ?? this.now() + secondaryBackoffMs(this.secondaryStreak), kind, true);
    } else {
      const reset = Number(headers['x-ratelimit-reset']);
      error = new RateLimitedError(budget, Number.isFinite(reset) ? Math.max(this.now(), this.toLocal(reset)) : this.now() + 60_000, kind);
    }
    error = this.bounded(error);
    // A secondary limit is the token's (GitHub counts concurrent requests over REST and GraphQL
    // together): no request on any budget is sent before it ends, so another stage does not meet it
    // again with requests of its own. The error keeps the budget that met it, for the hibernation.
    for (const blocked of kind === 'secondary' ? GITHUB_BUDGETS : [budget]) {
      const known = this.blocked.get(blocked);
      if (!known || known.until < error.until) this.blocked.set(blocked, error);
    }
    return error;
  }

  /** The error itself, or one that waits at most MAX_RATE_LIMIT_WAIT_MS, marked `malformedWait`. */
  private bounded(error: RateLimitedError): RateLimitedError {
    const latest = this.now() + MAX_RATE_LIMIT_WAIT_MS;
    if (error.until <= latest) return error;
    return new RateLimitedError(error.budget, latest, error.kind, error.secondaryBackoff, error.until);
  }

  /** What each budget had left at the last answer, for the status. */
  snapshot(): Partial<Record<Budget, QuotaSnapshot>> {
    const out: Partial<Record<Budget, QuotaSnapshot>> = {};
    for (const [budget, s] of this.budgets) out[budget] = { remaining: s.remaining, limit: s.limit, resetAt: this.toLocal(s.reset) };
    return out;
  }
}
