import type { SlotState } from '../../shared/protocol';
import type { HeldSlot, SlotSource } from '../runs/runPorts';
import type { KernelLock } from './procLocks';

/**
 * Issue 14: one pool as the orchestrator, the run manager and the GitHub sync use it, whatever holds
 * its slots: flock(2) files on this station (SlotPool) or advisory locks in PostgreSQL (PgSlotPool).
 */
export interface PoolBackend extends SlotSource {
  readonly name: string;
  /** Slots of the pool now (with postgres: core.pool, which an operator may change at any time). */
  readonly size: number;
  readonly waitTimeoutSeconds: number;
  acquire(runId: string, signal: AbortSignal, onPosition?: (position: number) => void): Promise<HeldSlot>;
  /** `index`: a slot the agent itself held (in-agent work), released by name. */
  released(index?: number): void;
  close(): void;
  /** Who holds each slot; never throws and never blocks. */
  state(isOwnRun: (runId: string) => boolean, locks?: Map<string, KernelLock>): SlotState[];
}
