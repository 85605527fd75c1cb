import { setTimeout as sleep } from 'node:timers/promises';

/** Tries of one request that meets a 5xx or a dropped connection, the first one included. */
export const REQUEST_TRIES = 3;
/** The first retry waits about this long; each next one about twice as long. */
export const RETRY_BASE_MS = 1000;

/**
 * @octokit/plugin-retry's options: it decides what is retried (a 5xx, and a dropped connection, which
 * Octokit reports as a 500 without an answer) and how often, but waits nothing itself (base 0): the
 * wait is `waitBeforeRetry`'s, inside the sync's own hook, where it sees the task's abort signal and
 * comes before the retry reserves its budget. Every 4xx is an answer, not a fault: never retried.
 */
export const RETRY_PLUGIN_OPTIONS = {
  retries: REQUEST_TRIES - 1,
  retryAfterBaseValue: 0,
  doNotRetry: Array.from({ length: 100 }, (_, i) => 400 + i),
};

/** Exponential backoff with jitter: the n-th retry waits between half and all of base × 2^(n-1). */
export function retryDelayMs(retry: number, baseMs = RETRY_BASE_MS, random: () => number = Math.random): number {
  const full = baseMs * 2 ** Math.max(0, retry - 1);
  return Math.round(full / 2 + (random() * full) / 2);
}

/**
 * Before a retry (plugin-retry counts them in `request.retryCount`): a timer, never a busy wait, that
 * an abort (task timeout, cancel) ends at once with the abort's error, which is never retried.
 */
export async function waitBeforeRetry(
  request: { retryCount?: number } | undefined,
  baseMs: number,
  signal: AbortSignal | undefined,
): Promise<void> {
  const retry = request?.retryCount ?? 0;
  if (retry <= 0) return;
  await sleep(retryDelayMs(retry, baseMs), undefined, signal === undefined ? {} : { signal });
}
