import { createHash } from 'node:crypto';
import type { CatalogEntry } from '../catalog/catalog';
import { readProcInfo } from '../../shared/node/procInfo';
import type { Logger } from '../log/logger';
import { signalRunGroup, type RunGroup } from './runGroup';
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

/**
 * SIGTERM to the run's group now, SIGKILL after the grace period. Each signal goes only to a group
 * that is still provably the run's (runGroup.ts), and the SIGKILL timer is the run's: `stopTimers`
 * (called when the run finishes) clears it, so it can never hit a later process that was given the
 * same number as its group.
 */
export function terminateGroup(state: ActiveRun, graceSeconds: number, logger: Logger): void {
  const group = groupOf(state.run);
  signalRunGroup(group, 'SIGTERM');
  if (state.grace) clearTimeout(state.grace);
  state.grace = setTimeout(() => {
    state.grace = null;
    if (signalRunGroup(group, 'SIGKILL')) {
      logger.warn({ runId: state.run.runId, pgid: group.pgid }, 'fetcher group outlived the cancel grace period; sent SIGKILL');
    }
  }, graceSeconds * 1000);
  state.grace.unref();
}

/** Ends everything that runs on a timer for the run: heartbeat, grace SIGKILL, group watch. */
export function stopTimers(state: ActiveRun): void {
  if (state.heartbeat) clearInterval(state.heartbeat);
  state.heartbeat = null;
  if (state.grace) clearTimeout(state.grace);
  state.grace = null;
  state.watch?.stop();
}
