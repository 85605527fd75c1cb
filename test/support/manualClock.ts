import type { Clock, Timer } from '../../agent/schedule/clock';

interface Pending {
  at: number;
  seq: number;
  fn: () => void;
  cancelled: boolean;
}

/**
 * A clock that moves only when told, for simulating days of schedule in a test or a benchmark.
 * Like the real thing it keeps two times: timers run on elapsed (monotonic) time, `now()` is wall
 * time, and `jump` moves wall time alone, as an NTP step or a suspended laptop does.
 */
export class ManualClock implements Clock {
  private elapsed = 0;
  private offset: number;
  private seq = 0;
  private pending: Pending[] = [];

  constructor(start: Date) {
    this.offset = start.getTime();
  }

  now(): Date {
    return new Date(this.offset + this.elapsed);
  }

  setTimer(fn: () => void, ms: number): Timer {
    const p: Pending = { at: this.elapsed + Math.max(0, ms), seq: this.seq++, fn, cancelled: false };
    this.pending.push(p);
    return {
      cancel: () => {
        p.cancelled = true;
      },
    };
  }

  /** Lets `ms` pass, running each timer at its own time, in order (timers set meanwhile included). */
  advance(ms: number): void {
    const end = this.elapsed + ms;
    for (;;) {
      this.pending = this.pending.filter((p) => !p.cancelled);
      let next: Pending | null = null;
      for (const p of this.pending)
        if (p.at <= end && (next === null || p.at < next.at || (p.at === next.at && p.seq < next.seq))) next = p;
      if (next === null) break;
      this.pending.splice(this.pending.indexOf(next), 1);
      this.elapsed = next.at;
      next.fn();
    }
    this.elapsed = end;
  }

  advanceTo(wall: Date): void {
    this.advance(Math.max(0, wall.getTime() - this.now().getTime()));
  }

  /** Steps wall time by `ms` (negative: backwards) without letting time pass for timers. */
  jump(ms: number): void {
    this.offset += ms;
  }

  /** Timers not yet run or cancelled. */
  timers(): number {
    return this.pending.filter((p) => !p.cancelled).length;
  }
}
