import type { PoolMemory, PoolState, RunInfo } from '../../shared/protocol';
import type { PoolBackend } from '../slots/poolBackend';
import { lazyKernelFlocks, type KernelLocks } from '../flock/procLocks';

/** What a pool's picture is read from (structural: the state layer imports neither runs nor memory). */
export interface PoolStateSources {
  pools: ReadonlyMap<string, PoolBackend>;
  /** The runs of this process waiting or running, and whether a slot's holder is one of them. */
  runs: { activeRuns(): RunInfo[]; isOwnRun(runId: string): boolean };
  memory: { poolMemory(pool: string): PoolMemory | undefined };
}

/**
 * The pools' pictures: who holds each slot, how many runs wait, the pool's memory. Each call reads
 * the active runs once, and the kernel's lock table at most once, for all the pools it pictures.
 */
export class PoolStates {
  constructor(private readonly sources: PoolStateSources) {}

  /** Every pool. */
  all(): PoolState[] {
    const active = this.sources.runs.activeRuns();
    const locks = lazyKernelFlocks();
    return [...this.sources.pools.values()].map((pool) => this.stateOf(pool, locks, active));
  }

  /** The named pools that exist, in the order named: a publication while runs move (see SlotPool.state). */
  of(names: string[]): PoolState[] {
    const locks = lazyKernelFlocks();
    const active = this.sources.runs.activeRuns();
    const states: PoolState[] = [];
    for (const name of names) {
      const pool = this.sources.pools.get(name);
      if (pool) states.push(this.stateOf(pool, locks, active, true));
    }
    return states;
  }

  private stateOf(pool: PoolBackend, locks: KernelLocks, active: RunInfo[], publishing = false): PoolState {
    const slots = pool.state((runId) => this.sources.runs.isOwnRun(runId), locks, publishing);
    return {
      name: pool.name,
      size: pool.size,
      used: slots.filter((s) => s.holder !== null).length,
      waiting: active.filter((r) => r.pool === pool.name && r.status === 'waiting').length,
      waitTimeoutSeconds: pool.waitTimeoutSeconds,
      slots,
      memory: this.sources.memory.poolMemory(pool.name),
    };
  }
}
