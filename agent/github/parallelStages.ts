import { runTask, type TaskOutcome } from './boundedTasks';

/** What stops a stage for a while (a rate limit): its tasks start again at `until` (this machine's clock). */
export interface StageBlock {
  until: number;
}

export interface ParallelStagesOptions {
  /** The ceiling of tasks at once, of every stage together. */
  concurrency: number;
  timeoutMs: number;
  /** Checked before each start: false stops every stage (started tasks finish, none new start). */
  mayStart: () => boolean;
  /** Cancels everything: aborts the tasks' signals. */
  signal?: AbortSignal;
}

/**
 * Several stages' items on one bounded pool, side by side: a free slot goes to the next stage in turn
 * that has an item and is not blocked. A task that fails with a block (`blockOf`) blocks its stage
 * only: the item goes back to the head of its stage's queue (it has no outcome yet; `onBlocked`), the stage starts
 * nothing before the block's `until`, and the other stages go on. When a stage's `until` comes while
 * other tasks still work, it starts again (a timer, no wait of its own); when nothing works and every
 * stage with items left is blocked, no stage can proceed: the stages still blocked are returned, for
 * the caller to hibernate until the earliest `until`. Items are never started twice at once; every
 * other outcome goes to `onOutcome` as the task ends. An `onOutcome` that throws stops new starts; the
 * error is thrown once the started tasks have ended, so that nothing of theirs lands after it.
 */
export async function runParallelStages<S, T, B extends StageBlock>(
  queues: ReadonlyArray<{ stage: S; items: readonly T[] }>,
  options: ParallelStagesOptions,
  task: (stage: S, item: T, signal: AbortSignal) => Promise<void>,
  blockOf: (error: unknown) => B | null,
  onOutcome: (stage: S, item: T, outcome: Exclude<TaskOutcome<void>, { kind: 'not-started' }>) => Promise<void>,
  onBlocked: (stage: S, item: T, block: B) => void = () => {},
): Promise<Map<S, B>> {
  const pending = new Map<S, T[]>(queues.map((q) => [q.stage, [...q.items]]));
  const stages = queues.map((q) => q.stage);
  const blocked = new Map<S, B>();
  let running = 0;
  let turn = 0;
  let failure: { error: Error } | null = null;
  let timer: NodeJS.Timeout | undefined;

  return new Promise<Map<S, B>>((resolve, reject) => {
    const startable = (stage: S, now: number): boolean => {
      if (pending.get(stage)!.length === 0) return false;
      const block = blocked.get(stage);
      return block === undefined || block.until <= now;
    };
    const nextStage = (now: number): S | undefined => {
      for (let i = 0; i < stages.length; i += 1) {
        const stage = stages[(turn + i) % stages.length];
        if (startable(stage, now)) {
          turn = (turn + i + 1) % stages.length;
          return stage;
        }
      }
      return undefined;
    };
    const settle = (): void => {
      clearTimeout(timer);
      if (failure !== null) {
        reject(failure.error);
        return;
      }
      const left = new Map<S, B>();
      for (const [stage, block] of blocked) if (pending.get(stage)!.length > 0) left.set(stage, block);
      resolve(left);
    };
    const pump = (): void => {
      clearTimeout(timer);
      timer = undefined;
      const now = Date.now();
      for (const [stage, block] of blocked) if (block.until <= now) blocked.delete(stage);
      const go = failure === null && options.mayStart() && options.signal?.aborted !== true;
      while (go && running < options.concurrency) {
        const stage = nextStage(now);
        if (stage === undefined) break;
        const item = pending.get(stage)!.shift()!;
        running += 1;
        void runTask(item, options, (it, signal) => task(stage, it, signal))
          .then(async (outcome) => {
            const block = outcome.kind === 'failed' ? blockOf(outcome.error) : null;
            if (block === null) {
              await onOutcome(stage, item, outcome as Exclude<TaskOutcome<void>, { kind: 'not-started' }>);
              return;
            }
            pending.get(stage)!.unshift(item);
            onBlocked(stage, item, block);
            const known = blocked.get(stage);
            if (known === undefined || known.until < block.until) blocked.set(stage, block);
          })
          .catch((error: unknown) => {
            failure ??= { error: error instanceof Error ? error : new Error(String(error)) };
          })
          .finally(() => {
            running -= 1;
            pump();
          });
      }
      if (running > 0) {
        // Others still work: a blocked stage goes on at its until, not only when they are done.
        if (!go) return;
        let next = Infinity;
        for (const [stage, block] of blocked) if (pending.get(stage)!.length > 0) next = Math.min(next, block.until);
        if (next !== Infinity) timer = setTimeout(pump, Math.max(0, next - Date.now()));
        return;
      }
      settle();
    };
    pump();
  });
}
