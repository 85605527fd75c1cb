/** How one task ended: its value, or why it did not (it threw, timed out, or was never started). */
export type TaskOutcome<R> = { kind: 'done'; value: R } | { kind: 'failed'; error: unknown; timedOut: boolean } | { kind: 'not-started' };

export interface BoundedOptions {
  concurrency: number;
  timeoutMs: number;
  /** Checked before each start: false stops the stage (started tasks finish, none new start). */
  mayStart: () => boolean;
  /** Cancels everything: aborts the tasks' signals. */
  signal?: AbortSignal;
}

/**
 * Task.async_stream with ordered: false and on_timeout: :kill_task, in TypeScript: at most
 * `concurrency` tasks at once, each with its own abort signal and a declared timeout; a task that
 * throws or times out is an outcome like any other and never fails its siblings. `onOutcome` is called
 * as each task ends (completion order); items never started are reported last.
 */
export async function runBounded<T, R>(
  items: readonly T[],
  options: BoundedOptions,
  task: (item: T, signal: AbortSignal) => Promise<R>,
  onOutcome: (item: T, outcome: TaskOutcome<R>) => Promise<void> | void,
): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      if (!options.mayStart() || options.signal?.aborted === true) return;
      const item = items[next++];
      await onOutcome(item, await runTask(item, options, task));
    }
  };
  await Promise.all(Array.from({ length: Math.min(options.concurrency, items.length) }, worker));
  for (; next < items.length; next += 1) await onOutcome(items[next], { kind: 'not-started' });
}

/** One task with its own abort signal (aborted by `options.signal` too) and its declared timeout. */
export async function runTask<T, R>(
  item: T,
  options: Pick<BoundedOptions, 'timeoutMs' | 'signal'>,
  task: (item: T, signal: AbortSignal) => Promise<R>,
): Promise<TaskOutcome<R>> {
  const controller = new AbortController();
  const onCancel = () => controller.abort(options.signal?.reason);
  options.signal?.addEventListener('abort', onCancel, { once: true });
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), options.timeoutMs);
  });
  const work = (async (): Promise<TaskOutcome<R>> => {
    try {
      return { kind: 'done', value: await task(item, controller.signal) };
    } catch (error) {
      return { kind: 'failed', error, timedOut: false };
    }
  })();
  try {
    const first = await Promise.race([work, timedOut]);
    if (first !== 'timeout') return first;
    // Kill the task: abort its requests, and let it settle before reporting, so that no write of
    // its own lands after its "not reached" (aborted requests end at once; a query has its timeout).
    controller.abort(new Error('task timeout'));
    await work;
    return { kind: 'failed', error: new Error(`task timed out after ${options.timeoutMs} ms`), timedOut: true };
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', onCancel);
  }
}
