/**
 * The upper bounds (seconds) of the run duration histogram: a fetcher runs from seconds to hours, so
 * 1 s to 12 h. The spool's run totals keep their counts by the index of these bounds, so the
 * histogram and the totals are cut at the same places.
 */
export const RUN_DURATION_BUCKETS: readonly number[] = [1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200];

/** What every ended run in the store adds to the metrics (runTotalsSql.ts keeps it as runs end). */
export interface RunTotals {
  /** By fetcher and outcome: the runs, their tries after the first, and (completed) the latest finish. */
  ends: ReadonlyArray<{ fetcher: string; status: string; runs: number; retries: number; lastFinished: string | null }>;
  /** By fetcher and duration bucket (an index of RUN_DURATION_BUCKETS, its length for +Inf): the runs and their seconds. */
  durations: ReadonlyArray<{ fetcher: string; bucket: number; runs: number; seconds: number }>;
}
