import type { RunInfo } from '../../shared/protocol';
import type { CatalogEntry } from '../catalog/catalog';
import type { Config } from '../config/config';
import type { Logger } from '../log/logger';
import type { RunMemory } from '../memory/runMemory';
import type { Clock, RunJournal, RunSpawner, SlotSource } from './runPorts';
import type { InAgentWork } from './runMoves';
import type { StartGate } from './startGate';

/** What the run manager is given: the world it works in (runPorts.ts) and its settings. */
export interface RunManagerDeps {
  config: Pick<Config, 'logDir' | 'dataDir' | 'homeDir' | 'heartbeatSeconds' | 'cancelGraceSeconds' | 'logCapBytes'>;
  catalog: { resolve(name: string): CatalogEntry };
  pools: ReadonlyMap<string, SlotSource>;
  poolOf(entry: CatalogEntry): string;
  gate: StartGate;
  journal: RunJournal;
  spawner: RunSpawner;
  clock: Clock;
  logger: Logger;
  wrapperPath: string;
  /** This process (agent or CLI), recorded as the owner of its runs. An agent's waiting runs outlive it (the next agent resumes them). */
  self: { pid: number; startTime: number; role?: 'agent' | 'cli' };
  /** CRON_POOL_<POOL>_RUN_TIMEOUT of a pool (0: none); absent: no pool default. */
  runTimeoutOf?(pool: string): number;
  /** How long a run may wait at the disk gate (CRON_DISK_MAX_WAIT_SECONDS): a next agent counts a resumed wait against it. */
  diskMaxWaitSeconds?: number;
  /** The jitter of retry delays (tests may fix it). */
  random?(): number;
  /** memory ceilings: each run's cgroup, or /proc sampling; absent: no figures at all. */
  memory?: RunMemory;
  /** Called after every durable change of a run, and of a pool's occupancy (for the state hub). */
  onRunChange(run: RunInfo): void;
  onPoolChange(pool: string): void;
  /** The last run of this process waiting or running has ended. */
  onIdle?(): void;
  /** Runs the GitHub sync entries (`kind: github-sync`) inside the agent; without it they are refused. */
  github?: InAgentWork;
}
