import type { SlotState } from '../../shared/protocol';
import type { SlotBackendCause } from './slotBackendCause';
import type { OwnerRecord } from './ownerRecord';
import type { KernelLocks } from '../flock/procLocks';

/**
 * A slot taken for a run (the run manager's HeldSlot has the same shape: slots do not import runs).
 * `fd` is handed to the fetcher as its fd 3: a flock'd file, or the lifeline of a postgres lock keeper.
 */
export interface PoolGrant {
  index: number;
  lock: { readonly fd: number; writeRecord(record: OwnerRecord, holderEnded?: Promise<boolean>): void; closeOwnCopy(): void };
}

/**
 * One pool as the orchestrator, the run manager and the GitHub sync use it, whatever holds
 * its slots: flock(2) files on this station (SlotPool) or advisory locks in PostgreSQL (PgSlotPool).
 */
export interface PoolBackend {
  readonly name: string;
  /** Slots of the pool now (with postgres: core.pool, which an operator may change at any time). */
  readonly size: number;
  readonly waitTimeoutSeconds: number;
  /**
   * Waits for a slot, telling where the run is in the queue, or (postgres) that the slot database cannot
   * be used now: the run waits on for it, as long as its wait timeout allows.
   */
  acquire(
    runId: string,
    signal: AbortSignal,
    onPosition?: (position: number) => void,
    onBlocked?: (cause: SlotBackendCause) => void,
  ): Promise<PoolGrant>;
  /** A run of this process ended: serve the next waiter now. `index`: a slot the agent itself held. */
  released(index?: number): void;
  close(): void;
  /**
   * Who holds each slot; never throws and never blocks. `publishing`: a picture published while runs
   * move, which may take a slot seen free moments ago as still free (the pool's onUnsure follows).
   */
  state(isOwnRun: (runId: string) => boolean, locks?: KernelLocks, publishing?: boolean): SlotState[];
}
