import type { RunReason, WaitReason } from '../../shared/protocol';
import type { ActiveRun } from './activeRun';
import type { HeldSlot } from './runPorts';

/**
 * The moves of a run whose work happens inside the agent (a GitHub sync) rather than in a fetcher
 * process: the run manager owns the states and their telemetry (runTransitions.ts); the work only
 * says what happened. Each move resolves once it is durable.
 */
export interface RunMoves {
  /**
   * waiting → running on `slot`, the first leg (the agent holds the slot's lock itself): `start`.
   * `workLeftMs`: the working time its timeout leaves (the run's deadline is now plus it).
   */
  start(state: ActiveRun, slot: number, detail: Record<string, unknown>, workLeftMs?: number | null): Promise<void>;
  /** A hibernating run → running on `slot`, a later leg: `resumed`; `workLeftMs` as for `start`. */
  wake(state: ActiveRun, slot: number, detail: Record<string, unknown>, workLeftMs?: number | null): Promise<void>;
  /** running → waiting with reason `hibernating` and the wake-up time (`hibernated`); the slot is already released; `workLeftMs` is kept for the wake. */
  hibernating(state: ActiveRun, until: Date, detail: Record<string, unknown>, workLeftMs?: number | null): Promise<void>;
  /** running → waiting for its storage (`awaitStorage`, reason `hibernating`, `wait: storage`); the slot is already released. */
  awaitingStorage(
    state: ActiveRun,
    wait: Extract<WaitReason, { kind: 'storage' }>,
    detail: Record<string, unknown>,
    workLeftMs?: number | null,
  ): Promise<void>;
  /** Why a waiting run still waits (the pool, when it wakes up). */
  setWait(state: ActiveRun, wait: WaitReason): void;
  /** A `heartbeat` event while the work goes on. */
  heartbeat(state: ActiveRun, payload: Record<string, unknown>): void;
  /** The task now under way for the run (a leg, a wake-up): a shutdown awaits it. */
  driving(state: ActiveRun, work: Promise<void>): void;
  /** The run's end; its slot is already released. */
  finish(
    state: ActiveRun,
    status: 'completed' | 'failed' | 'cancelled',
    reason: RunReason | null,
    exitCode: number | null,
    message?: string,
  ): Promise<void>;
}

/** Work a run of some catalog kind does inside the agent, between its first slot and its finish. */
export interface InAgentWork {
  /** Whether this process takes over such runs left by a dead agent (the agent does; an in-process CLI does not). */
  readonly adopts: boolean;
  /** The run got its first slot; the agent holds the lock until the work releases it. */
  begin(state: ActiveRun, grant: HeldSlot, moves: RunMoves): void;
  /** A run left `running` or hibernating by an agent that is gone: this agent takes it over. */
  adopt(state: ActiveRun, moves: RunMoves): void;
}
