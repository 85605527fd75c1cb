import type { CatalogEntry } from '../catalog/catalog';
import type { RunWatch } from './runProcess';
import type { RunGroup } from '../process/runGroup';
import { runPolicy, type RunPolicy } from './runPolicy';
import type { StoredRun } from './runStore';

/**
 * What the run manager keeps of a run between enqueue and finish. `run` is the run's state and
 * changes only through its moves (runTransitions.ts); everything else is the agent's in-memory handle
 * on it (timers, the watch, the task that drives it), which no other agent could use.
 */
export interface ActiveRun {
  run: StoredRun;
  entry: CatalogEntry;
  /** The entry's retries, timeout and stall watchdog, with their defaults. */
  policy: RunPolicy;
  /** Aborts the run's waits: a cancel, or the agent stopping (the reason is a CancelledError or a ParkedError). */
  abort: AbortController;
  /** Whether a client asked to cancel the run (runGuards.ts): the request is an event, the run's end its move. */
  cancel: 'none' | 'requested';
  heartbeat: NodeJS.Timeout | null;
  /** Follows the run's process group to its end. */
  watch: RunWatch | null;
  /** The SIGKILL after a cancel's grace period: it belongs to the run and ends with it. */
  grace: NodeJS.Timeout | null;
  /** The try's deadline and the stall watchdog's look at the log: they end with the try. */
  deadlineTimer: NodeJS.Timeout | null;
  stallTimer: NodeJS.Timeout | null;
  /** The log's size when last looked at (the stall watchdog's measure of growth). */
  logSize: number;
  /** The task under way for the run (its wait-and-start, a backoff, in-agent work); a shutdown awaits it so the run reaches its end. */
  driving: Promise<void> | null;
  /** Processes still alive after the wrapper ended (they hold the slot), as last seen. */
  lingering: number[];
}

/** A run left its queue before it started: cancelled by a client, or the agent is stopping. */
export class CancelledError extends Error {
  constructor(
    readonly reason: 'cancelled' | 'agent-stopping',
    message: string,
  ) {
    super(message);
    this.name = 'CancelledError';
  }
}

/** The agent stops while the run waits: it stays waiting, for the next agent to resume. */
export class ParkedError extends Error {
  constructor() {
    super('the agent stopped while the run waited; the next agent resumes it');
    this.name = 'ParkedError';
  }
}

export function newActiveRun(run: StoredRun, entry: CatalogEntry, policy: RunPolicy = runPolicy(entry)): ActiveRun {
  return {
    run,
    entry,
    policy,
    abort: new AbortController(),
    cancel: 'none',
    heartbeat: null,
    watch: null,
    grace: null,
    deadlineTimer: null,
    stallTimer: null,
    logSize: -1,
    driving: null,
    lingering: [],
  };
}

export function groupOf(run: StoredRun): RunGroup {
  return { runId: run.runId, pgid: run.pid ?? 0, startTime: run.startTime ?? 0 };
}

/** Resolves at `until`, or rejects with the signal's reason when it aborts first. */
export function sleepUntil(until: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
    };
    const timer = setTimeout(
      () => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      },
      Math.max(0, until - Date.now()),
    );
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
