/**
 * The sync's concurrency, declared once (ADR 0006 item 3). Each task holds a database connection while
 * it writes a page, so the ceiling must leave the rest of the agent part of the pool: exhausting the
 * pool would stall the whole agent, not only the sync. 5 tasks leave half of the default pool of 10.
 */
export const GITHUB_SYNC_CONCURRENCY = 5;
/** Connections of the pool kept for everything but the sync's tasks (status, telemetry, the stage's own writes). */
export const GITHUB_POOL_HEADROOM = 5;
/** Longest a repository's stage may take before it is abandoned as not reached (`timeout`). */
export const GITHUB_TASK_TIMEOUT_MS = 10 * 60_000;

/** Refuses a ceiling the database cannot carry; SQLite serialises writes, so only the bounds apply. */
export function validateConcurrency(concurrency: number, poolSize: number, dialect: 'postgres' | 'sqlite'): void {
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 50) {
    throw new Error(`github sync concurrency ${concurrency}: allowed: a whole number from 1 to 50`);
  }
  if (dialect === 'postgres' && concurrency > poolSize - GITHUB_POOL_HEADROOM) {
    throw new Error(
      `github sync concurrency ${concurrency} exceeds the database pool (${poolSize}) minus its headroom (${GITHUB_POOL_HEADROOM})`,
    );
  }
}
