import type { MemorySource } from '../../shared/protocol';
import type { RunGroup } from '../process/runGroup';
import type { WaiterFigures } from './cgroupLayout';

/** A run's memory and CPU as last read (MB, seconds). */
export interface RunUsage {
  memoryMb: number | null;
  peakMemoryMb: number | null;
  cpuSeconds: number | null;
  memoryLimitMb: number | null;
  memorySource: MemorySource;
}

/** The figures at a run's end, and how many of its processes a memory ceiling killed. */
export interface FinalUsage extends RunUsage {
  oomKilled: boolean;
  /** OOM kills the run's cgroup counted; null without a cgroup (nothing counts them). */
  oomKills: number | null;
}

/**
 * The seam between the run manager and memory ceilings (memoryCeilings.ts): everything the run's
 * lifecycle needs, and nothing about cgroups. Each call is cheap and never throws.
 */
export interface RunMemory {
  /** Before the spawn: makes the run's cgroup; resolves to what the wrapper needs in its environment (never rejects). */
  prepare(runId: string, pool: string, memoryMb: number | undefined): Promise<Record<string, string>>;
  /** After the spawn, or on adoption: follows the run (samples /proc when it has no cgroup). */
  track(runId: string, pool: string, group: RunGroup): void;
  usage(runId: string): RunUsage | null;
  /** Signals every process in the run's cgroup; SIGKILL kills the cgroup. False without a cgroup. */
  signal(runId: string, signal: NodeJS.Signals): boolean;
  /** The run's cgroup was read and removed at its end by the native spawner's waiter: `release` takes these figures. */
  ended(runId: string, pool: string, figures: WaiterFigures): void;
  /** At the run's end: the last figures; processes left in its cgroup are killed and it is removed. */
  release(runId: string): FinalUsage | null;
}
