import type { RunReason } from '../../shared/protocol';
import type { CatalogEntry } from '../catalog/catalog';
import type { FinalUsage } from '../memory/runMemory';
import type { ActiveRun } from './activeRun';
import type { RunManagerDeps } from './runManagerDeps';
import type { RunMoves } from './runMoves';
import type { RunPolicy } from './runPolicy';
import type { ExitInfo } from './runProcess';
import type { StoredRun } from './runStore';
import type { FINISH_MOVES, TransitionPorts } from './runTransitions';
import type { RunUpkeep } from './runUpkeep';

/** A status a queued run may end in. */
export type EndStatus = keyof typeof FINISH_MOVES;

/** How a run's end was reached, for `finish`. */
export interface EndOptions {
  message?: string;
  /** The run's final memory figures, when already taken (undefined: take them now). */
  usage?: FinalUsage | null;
  /** The run's slot was already given back (a refused start, in-agent work that released it): its end must not release it again. */
  slotGone?: boolean;
}

/**
 * What the parts of the run manager share (runStart.ts, runAdoption.ts, queuePositions.ts): the
 * runs this process manages, the ports their moves go through, and the run's end, which the manager
 * owns (a try's end may be a retry).
 */
export interface RunCore {
  readonly deps: RunManagerDeps;
  readonly ports: TransitionPorts;
  readonly active: Map<string, ActiveRun>;
  readonly upkeep: RunUpkeep;
  /** The moves of in-agent work (a GitHub sync). */
  readonly moves: RunMoves;
  entryOf(stored: StoredRun): CatalogEntry;
  policyOf(entry: CatalogEntry, pool: string): RunPolicy;
  finish(state: ActiveRun, status: EndStatus, reason: RunReason | null, exit: ExitInfo, options?: EndOptions): Promise<void>;
  /** Where the wrappers write the runs' exit status files. */
  statusDir(): string;
}
