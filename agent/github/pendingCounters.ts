import type { Budget, Counters } from './store/githubStore';

/**
 * Requests made and saved since the last write, handed over whole to the next write's increment (one
 * UPDATE per page, not one per request). `take` reads and zeroes in one synchronous step, so two tasks
 * can never hand over the same requests twice or lose any.
 */
export class PendingCounters {
  private made = 0;
  private saved = 0;
  private core = 0;
  private graphql = 0;
  private notModified = 0;

  requestMade(budget: Budget): void {
    this.made += 1;
    if (budget === 'graphql') this.graphql += 1;
    else this.core += 1;
  }

  /** A 304: made (and in requests_made), but without quota. */
  notModifiedAnswer(): void {
    this.notModified += 1;
  }

  requestSaved(): void {
    this.saved += 1;
  }

  take(): Partial<Counters> {
    const out = {
      requests_made: this.made,
      requests_saved: this.saved,
      requests_core: this.core,
      requests_graphql: this.graphql,
      requests_not_modified: this.notModified,
    };
    this.made = 0;
    this.saved = 0;
    this.core = 0;
    this.graphql = 0;
    this.notModified = 0;
    return out;
  }
}
