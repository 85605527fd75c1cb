import type { ActiveRun } from './activeRun';
import { isFinalStatus } from '../../shared/protocol';

// The conditions beside a run's state that decide whether something may still act on it, in one
// place: whether its end has begun, whether a cancel was asked for, and the run manager's own phase.

/**
 * The run manager's life: `open` takes runs; `draining` (a shutdown began) takes no new ones while
 * the waits it stops reach their ends; `closed` records nothing more (the runs are whoever adopts
 * them next's).
 */
export type ManagerPhase = 'open' | 'draining' | 'closed';

/** The run's final move has been made (it applies in memory at once): a second end (the watch, a cancel) is ignored. */
export function hasEnded(state: ActiveRun): boolean {
  return isFinalStatus(state.run.status);
}

/** A client asked to cancel the run: of this agent, or, for a running run, of an agent before it (the run's `cancelAsked`). */
export function cancelRequested(state: ActiveRun): boolean {
  return state.cancel === 'requested' || state.run.cancelAsked === true;
}

/** Notes a client's cancel; false when one was asked for already or the run has ended (nothing to do). */
export function requestCancel(state: ActiveRun): boolean {
  if (cancelRequested(state) || hasEnded(state)) return false;
  state.cancel = 'requested';
  return true;
}

/** Whether what happens to the run's process (its exit, a deadline, a stall, lingering) is still this manager's to record. */
export function reacts(phase: ManagerPhase, state: ActiveRun): boolean {
  return phase !== 'closed' && !hasEnded(state);
}
