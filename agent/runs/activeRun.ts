import { createHash } from 'node:crypto';
import type { CatalogEntry } from '../catalog/catalog';
import { readProcInfo } from '../slots/procInfo';
import type { RunGroup } from './runGroup';
import type { RunWatch } from './runProcess';
import type { StoredRun } from './runStore';

/** What the run manager keeps of a run between enqueue and finish. */
export interface ActiveRun {
  run: StoredRun;
  entry: CatalogEntry;
  abort: AbortController;
  cancelRequested: boolean;
  heartbeat: NodeJS.Timeout | null;
  /** Follows the run's process group to its end. */
  watch: RunWatch | null;
  /** The SIGKILL after a cancel's grace period: it belongs to the run and ends with it. */
  grace: NodeJS.Timeout | null;
  /** The wait-and-start of a run still waiting; a shutdown awaits it so the run reaches `finish`. */
  driving: Promise<void> | null;
  /** Processes still alive after the wrapper ended (they hold the slot), as last seen. */
  lingering: number[];
}

/** A run left its queue before it started: cancelled by a client, or the agent is stopping. */
export class CancelledError extends Error {
  constructor(readonly reason: 'cancelled' | 'agent-stopping', message: string) {
    super(message);
  }
}


/** A UUID-shaped id that is the same every time for one run's start or finish. */
export function runEventId(runId: string, event: string): string {
  const h = createHash('sha256').update(`quantilica:${runId}:${event}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-5${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
}


export function ownerAlive(run: StoredRun): boolean {
  const info = readProcInfo(run.ownerPid);
  return info !== null && info.startTime === run.ownerStartTime && info.state !== 'Z';
}

export function newActiveRun(run: StoredRun, entry: CatalogEntry): ActiveRun {
  return { run, entry, abort: new AbortController(), cancelRequested: false, heartbeat: null, watch: null, grace: null, driving: null, lingering: [] };
}

export function groupOf(run: StoredRun): RunGroup {
  return { runId: run.runId, pgid: run.pid ?? 0, startTime: run.startTime ?? 0 };
}
