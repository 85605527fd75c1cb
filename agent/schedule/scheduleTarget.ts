import type { RunReason } from '../../shared/protocol';

/**
 * What the schedule drives: the agent's run manager implements it. The schedule decides when a
 * fetcher is due; the target owns runs (queueing, pools, the disk gate, run history).
 */
export interface ScheduleTarget {
  /** A run of this fetcher is running or waiting (then a due run is skipped, not doubled). */
  isActive(fetcher: string): boolean;
  /** Queue a run of the fetcher. */
  enqueue(fetcher: string, trigger: 'schedule' | 'catch-up'): void;
  /** Record a run that fell due but was not started, as a `skipped` run with this reason (a token) and message. */
  recordSkipped(fetcher: string, reason: RunReason, trigger: 'schedule' | 'catch-up', message: string): void;
  /** When the fetcher's most recent run started (from the run history), for catch-up and status. */
  lastStartedAt(fetcher: string): Date | null;
  /** When the fetcher's most recent completed run finished, for lateness (absent: never). */
  lastSucceededAt?(fetcher: string): Date | null;
  /** When the fetcher's earliest recorded run was queued: lateness counts from there when it never completed. */
  firstRecordedAt?(fetcher: string): Date | null;
}
