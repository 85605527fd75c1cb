import type { RunStatus, WaitReason } from '../../shared/protocol';
import type { SlotGrant } from '../slots/slotPool';
import type { ActiveRun } from './activeRun';

/**
 * The moves of a run whose work happens inside the agent (a GitHub sync) rather than in a fetcher
 * process: the run manager owns the states and their telemetry; the work only says what happened.
 */
export interface RunMoves {
  /** waiting → running on `slot` (the agent holds the slot's lock itself): `start`, or `resumed` after a hibernation. */
  running(state: ActiveRun, slot: number, detail: Record<string, unknown>): void;
  /** running → waiting with reason `hibernating` and the wake-up time; the slot is already released. */
  hibernating(state: ActiveRun, until: Date, detail: Record<string, unknown>): void;
  /** Why a waiting run still waits (the pool, when it wakes up). */
  setWait(state: ActiveRun, wait: WaitReason): void;
  /** The run's end; its slot is already released. */
  finish(state: ActiveRun, status: RunStatus, reason: string | null, exitCode: number | null, message?: string): void;
}

/** Work a run of some catalog kind does inside the agent, between its first slot and its finish. */
export interface InAgentWork {
  /** The run got its first slot (`lockFd` held by the agent until the work releases it). */
  begin(state: ActiveRun, grant: SlotGrant, moves: RunMoves): void;
  /** A run left `running` or hibernating by an agent that is gone: take it over; false: not ours to adopt. */
  adopt(state: ActiveRun, moves: RunMoves): boolean;
}
