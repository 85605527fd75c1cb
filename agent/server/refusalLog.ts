import type { Logger } from '../log/logger';
import type { RefusalReason } from './upgradeGuard';

/**
 * Counts refused connections and logs them in aggregate: at most one line per period, with counts
 * per reason and never a header value, so a flood of bad upgrades costs a few bytes of log, not the
 * flood's size.
 */
export class RefusalLog {
  private counts = new Map<RefusalReason, number>();
  private timer: NodeJS.Timeout | null = null;
  private totalCount = 0;

  constructor(
    private readonly logger: Logger,
    private readonly periodMs = 10_000,
    private readonly message = 'refused connections to the protocol server',
  ) {}

  /** Every refusal since the start. */
  get total(): number {
    return this.totalCount;
  }

  count(reason: RefusalReason): void {
    this.totalCount++;
    this.counts.set(reason, (this.counts.get(reason) ?? 0) + 1);
    if (this.timer === null) {
      this.timer = setTimeout(() => this.flush(), this.periodMs);
      this.timer.unref();
    }
  }

  /** Logs what was counted since the last line (if anything) and stops the timer. */
  flush(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (this.counts.size === 0) return;
    const refused = Object.fromEntries(this.counts);
    const count = [...this.counts.values()].reduce((a, b) => a + b, 0);
    this.counts = new Map();
    this.logger.warn({ refused, count, total: this.totalCount }, this.message);
  }
}
