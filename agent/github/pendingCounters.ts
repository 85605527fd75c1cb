import type { Counters } from './store/githubStore';

/**
 * Requests made and saved since the last write, handed over whole to the next write's increment (one
 * UPDATE per page, not one per request). `take` reads and zeroes in one synchronous step, so two tasks
 * can never hand over the same requests twice or lose any.
 */
export class PendingCounters {
  private made = 0;
  private saved = 0;

  requestMade(): void {
    this.made += 1;
  }

  requestSaved(): void {
    this.saved += 1;
  }

  take(): Partial<Counters> {
    const out = { requests_made: this.made, requests_saved: this.saved };
    this.made = 0;
    this.saved = 0;
    return out;
  }
}
