import type { Cron } from 'croner';

export interface LatenessInput {
  cron: Cron;
  lateAfterMinutes: number;
  /** The entry's last completed run (its finish), or null when it never completed. */
  lastSuccess: Date | null;
  /** Without a success: the earliest time the entry is known to exist (its first recorded run, or the schedule's start). */
  knownSince: Date;
  now: Date;
}

export interface Lateness {
  /** Since when the entry is late, or null. */
  lateSince: Date | null;
  /** While not late: when it becomes late unless a run completes before (null: never, the cron has no next time). */
  lateAt: Date | null;
}

/**
 * The dead man's switch, computed from the schedule and the run history alone, so an agent that was
 * down across a due time sees it as well as one that was up: the first due time after the last success
 * (or, without one, after the entry is known) must be followed by a completed run within
 * `lateAfterMinutes`; once that much time passed without one, the entry is late from that moment
 * until a run completes.
 */
export function lateness({ cron, lateAfterMinutes, lastSuccess, knownSince, now }: LatenessInput): Lateness {
  const from = lastSuccess ?? knownSince;
  const due = cron.nextRun(from);
  if (due === null) return { lateSince: null, lateAt: null };
  const deadline = new Date(due.getTime() + lateAfterMinutes * 60_000);
  return deadline.getTime() <= now.getTime() ? { lateSince: deadline, lateAt: null } : { lateSince: null, lateAt: deadline };
}
