import type { PoolMemory, PoolState } from '../../shared/protocol';
import type { PoolBackend } from '../slots/poolBackend';
import { lazyKernelFlocks, type KernelLocks } from '../flock/procLocks';

/** What a pool's picture is read from (structural: the state layer imports neither runs nor memory). */
export interface PoolStateSources {
  pools: ReadonlyMap<string, PoolBackend>;
  /** How many runs of this process wait in each pool, and whether a slot's holder is one of them. */
  runs: { waitingCounts(): ReadonlyMap<string, number>; isOwnRun(runId: string): boolean };
  memory: { poolMemory(pool: string): PoolMemory | undefined };
}

/**
 * The pools' pictures: who holds each slot, how many runs wait, the pool's memory. Each call counts
 * the waiting runs once, and reads the kernel's lock table at most once, for all the pools it pictures.
 */
export class PoolStates {
  constructor(private readonly sources: PoolStateSources) {}

  /** Every pool. */
  all(): PoolState[] {
    const waiting = this.sources.runs.waitingCounts();
    const locks = lazyKernelFlocks();
    return [...this.sources.pools.values()].map((pool) => this.stateOf(pool, locks, waiting));
  }

  /** The named pools that exist, in the order named: a publication while runs move (see SlotPool.state). */
  of(names: string[]): PoolState[] {
    const locks = lazyKernelFlocks();
    const waiting = this.sources.runs.waitingCounts();
    const states: PoolState[] = [];
    for (const name of names) {
      const pool = this.sources.pools.get(name);
      if (pool) states.push(this.stateOf(pool, locks, waiting, true));
    }
    return states;
  }

  private stateOf(pool: PoolBackend, locks: KernelLocks, waiting: ReadonlyMap<string, number>, publishing = false): PoolState {
    const slots = pool.state((runId) => this.sources.runs.isOwnRun(runId), locks, publishing);
    return {
      name: pool.name,
      size: pool.size,
      used: slots.filter((s) => s.holder !== null).length,
      waiting: waiting.get(pool.name) ?? 0,
      waitTimeoutSeconds: pool.waitTimeoutSeconds,
      slots,
      memory: this.sources.memory.poolMemory(pool.name),
    };
  }
}
