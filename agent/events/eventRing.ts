import type { NumberedOperatorEvent, OperatorEvent } from '../../shared/protocol';

/** Events kept for `quantilica events`: enough for a day of trouble, bounded whatever happens. */
const DEFAULT_CAPACITY = 1000;

/**
 * The agent's recent operator events, numbered from 1: `quantilica events` lists them and a follower
 * long-polls for the ones after the last it saw. The oldest are dropped when the ring is full.
 */
export class EventRing {
  private readonly events: NumberedOperatorEvent[] = [];
  private seq = 0;
  private readonly waiters = new Set<() => void>();

  constructor(private readonly capacity = DEFAULT_CAPACITY) {}

  push(event: OperatorEvent): NumberedOperatorEvent {
    this.seq += 1;
    const numbered = { ...event, seq: this.seq };
    this.events.push(numbered);
    if (this.events.length > this.capacity) this.events.splice(0, this.events.length - this.capacity);
    for (const wake of [...this.waiters]) wake();
    return numbered;
  }

  /** Events after `after` (oldest first, at most `limit`); without `after`, the last `limit`. */
  list(after: number | undefined, limit: number): { events: NumberedOperatorEvent[]; next: number } {
    const newer = after === undefined ? this.events.slice(-limit) : this.events.filter((e) => e.seq > after).slice(0, limit);
    const next = newer.length > 0 ? newer[newer.length - 1].seq : Math.max(after ?? this.seq, 0);
    return { events: newer, next: after === undefined && newer.length === 0 ? this.seq : next };
  }

  /** Like `list`, but with nothing newer waits up to `waitMs` for an event (or `abort`). */
  async wait(
    after: number | undefined,
    limit: number,
    waitMs: number,
    abort?: (stop: () => void) => void,
  ): Promise<{ events: NumberedOperatorEvent[]; next: number }> {
    const now = this.list(after, limit);
    if (now.events.length > 0 || waitMs <= 0 || after === undefined) return now;
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, waitMs);
      this.waiters.add(done);
      abort?.(done);
    });
    return this.list(after, limit);
  }
}
