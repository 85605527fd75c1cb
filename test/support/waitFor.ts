export interface WaitForOptions {
  /** Give up after this long; the error names `what` and the last thing `cond` threw. */
  timeoutMs?: number;
  intervalMs?: number;
  /** What is awaited, for the timeout message ("the flag file", "run r1 to start"). */
  what: string;
}

/**
 * Polls `cond` until it returns something other than undefined, null or false, and resolves to
 * that value. A condition that throws counts as not yet true (an assertion that does not hold
 * yet); its last error is in the timeout message. Bounded: tests never sleep a guessed time.
 */
export async function waitFor<T>(
  cond: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  { timeoutMs = 5000, intervalMs = 10, what }: WaitForOptions,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown = null;
  for (;;) {
    try {
      const value = await cond();
      if (value !== undefined && value !== null && value !== false) return value;
      lastError = null;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const detail = lastError === null ? '' : `; last error: ${describe(lastError)}`;
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${detail}`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

function describe(err: unknown): string {
  if (err instanceof Error) return err.message;
  return typeof err === 'string' ? err : JSON.stringify(err);
}
