const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * A GitHub sync's timeout, counted in working time only: the clock runs while a leg holds its slot
 * and stands still while the sync hibernates or waits for a slot. What is left is kept with the run
 * (`workLeftMs`, with the leg's `deadline`), so a next agent goes on from there.
 */
export class SyncWorkClock {
  private timer: NodeJS.Timeout | null = null;
  private startedAt: number | null = null;

  /** `leftMs`: null for no timeout. */
  constructor(
    private leftMs: number | null,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * What a run's record leaves of its timeout. A run left hibernating kept it; a run whose agent died
   * in the middle of a leg worked until its sync's last recorded progress (`workedUntil`), not through
   * the agent's absence.
   */
  static leftOf(
    timeoutSeconds: number | null,
    run: { deadline?: string | null; workLeftMs?: number | null },
    workedUntil: number | null,
  ): number | null {
    if (timeoutSeconds === null) return null;
    const full = timeoutSeconds * 1000;
    const atLegStart = run.workLeftMs ?? full;
    const deadline = run.deadline ? Date.parse(run.deadline) : NaN;
    if (!Number.isFinite(deadline)) return atLegStart;
    const legStart = deadline - atLegStart;
    const worked = workedUntil === null ? 0 : Math.max(0, workedUntil - legStart);
    return Math.max(0, Math.min(atLegStart, atLegStart - worked));
  }

  /** The working time left now (null: no timeout). */
  left(): number | null {
    if (this.leftMs === null) return null;
    return this.startedAt === null ? this.leftMs : Math.max(0, this.leftMs - (this.now() - this.startedAt));
  }

  /** A leg starts working: `onDeadline` once the time left is used up (unless paused first). Returns the time left. */
  start(onDeadline: () => void): number | null {
    this.pause();
    if (this.leftMs === null) return null;
    this.startedAt = this.now();
    this.arm(onDeadline);
    return this.leftMs;
  }

  /** The leg stops working (it hibernates or ends): the clock stands still. Returns the time left. */
  pause(): number | null {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.leftMs = this.left();
    this.startedAt = null;
    return this.leftMs;
  }

  private arm(onDeadline: () => void): void {
    const left = this.left() ?? 0;
    // A timeout beyond what a Node timer holds (2^31-1 ms) is waited in parts, never overflowed.
    this.timer = setTimeout(
      () => {
        this.timer = null;
        if ((this.left() ?? 0) > 0) this.arm(onDeadline);
        else onDeadline();
      },
      Math.min(left, MAX_TIMER_MS),
    );
    this.timer.unref();
  }
}
