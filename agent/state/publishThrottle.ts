import type { Clock, Timer } from '../schedule/clock';

export interface PublishThrottleOptions {
  /** The window after a publication in which further changes wait for one trailing publication. */
  windowMs: number;
  /** The window is also at least this many times the last publication's cost (under load it grows). */
  costShare: number;
}

/**
 * When to publish something that is expensive to compute and changes in bursts (the pools' pictures).
 * A change after a quiet window is published on the next turn (the leading edge: an operator sees a
 * slot change at once); changes that follow inside the window are coalesced into one trailing
 * publication at its end, and so on while they keep coming. `publish` returns what it cost (ms).
 */
export class PublishThrottle {
  private pending: Timer | null = null;
  private lastPublish = Number.NEGATIVE_INFINITY;
  private lastCostMs = 0;

  constructor(
    private readonly publish: () => number,
    private readonly clock: Pick<Clock, 'setTimer'> & { elapsed(): number },
    private readonly opts: PublishThrottleOptions,
  ) {}

  /** Something changed: publish now if the window is over, else once at its end. */
  changed(): void {
    if (this.pending !== null) return;
    const windowEnd = this.lastPublish + Math.max(this.opts.windowMs, this.opts.costShare * this.lastCostMs);
    // 0: the next turn, so changes made in this turn go out together.
    this.pending = this.clock.setTimer(() => this.fire(), Math.max(0, windowEnd - this.clock.elapsed()));
  }

  /** Drops a pending publication (the owner is closing). */
  cancel(): void {
    this.pending?.cancel();
    this.pending = null;
  }

  private fire(): void {
    this.pending = null;
    this.lastPublish = this.clock.elapsed();
    this.lastCostMs = this.publish();
  }
}

/** Monotonic elapsed time and unref'd timers: a pending publication alone keeps no process alive. */
export const throttleClock = {
  elapsed: () => performance.now(),
  setTimer(fn: () => void, ms: number): Timer {
    if (ms <= 0) {
      const immediate = setImmediate(fn).unref();
      return { cancel: () => clearImmediate(immediate) };
    }
    const timer = setTimeout(fn, ms).unref();
    return { cancel: () => clearTimeout(timer) };
  },
};
