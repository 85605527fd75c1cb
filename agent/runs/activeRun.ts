import type { CatalogEntry } from '../catalog/catalog';
import type { RunWatch } from './runProcess';
import type { RunGroup } from './runGroup';
import type { StoredRun } from './runStore';

/** What the run manager keeps of a run between enqueue and finish. */
export interface ActiveRun {
  run: StoredRun;
  entry: CatalogEntry;
  /** Aborts the run's waits: a cancel, or the agent stopping (the reason is a CancelledError). */
  abort: AbortController;
  cancelRequested: boolean;
  /** Set once the run's final move has begun: a second end (the watch, a cancel) is ignored. */
  ending: boolean;
  heartbeat: NodeJS.Timeout | null;
  /** Follows the run's process group to its end. */
  watch: RunWatch | null;
  /** The SIGKILL after a cancel's grace period: it belongs to the run and ends with it. */
  grace: NodeJS.Timeout | null;
  /** The wait-and-start of a run still waiting; a shutdown awaits it so the run reaches its end. */
  driving: Promise<void> | null;
  /** Processes still alive after the wrapper ended (they hold the slot), as last seen. */
  lingering: number[];
}

/** A run left its queue before it started: cancelled by a client, or the agent is stopping. */
export class CancelledError extends Error {
  constructor(readonly reason: 'cancelled' | 'agent-stopping', message: string) {
    super(message);
    this.name = 'CancelledError';
  }
}

export function newActiveRun(run: StoredRun, entry: CatalogEntry): ActiveRun {
  return { run, entry, abort: new AbortController(), cancelRequested: false, ending: false, heartbeat: null, watch: null, grace: null, driving: null, lingering: [] };
}

export function groupOf(run: StoredRun): RunGroup {
  return { runId: run.runId, pgid: run.pid ?? 0, startTime: run.startTime ?? 0 };
}
