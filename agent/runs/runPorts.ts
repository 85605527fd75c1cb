import type { OwnerRecord } from '../slots/ownerRecord';
import type { SlotBackendCause } from '../slots/slotBackendCause';
import type { NewTelemetryEvent } from '../telemetry/telemetrySink';
import type { RunGroup } from '../process/runGroup';
import type { ExitInfo, RunProcess, RunWatch, SpawnOptions } from './runProcess';
import type { StoredRun } from './runStore';

// What the run manager needs from the world, as narrow interfaces: the agent passes the real slot
// pools, processes, SQLite journal and clock; the unit tests pass fakes that let them stop a run at
// any step (test/unit/runManager*.test.ts).

/** A slot taken for a run: the flock'd descriptor to hand over as fd 3, and its owner record. */
export interface HeldSlot {
  index: number;
  lock: { readonly fd: number; writeRecord(record: OwnerRecord, holderEnded?: Promise<boolean>): void; closeOwnCopy(): void };
}

/** One pool as the run manager uses it (SlotPool). */
export interface SlotSource {
  acquire(
    runId: string,
    signal: AbortSignal,
    onPosition: (position: number) => void,
    onBlocked?: (cause: SlotBackendCause) => void,
  ): Promise<HeldSlot>;
  /** How long a run may wait for a slot (a next agent counts a resumed wait against it). */
  readonly waitTimeoutSeconds?: number;
  /** A run of this process ended: serve the next waiter now. */
  released(): void;
}

/** Process creation and the run's process group (runProcess.ts, runGroup.ts). */
export interface RunSpawner {
  spawn(opts: SpawnOptions): Promise<RunProcess>;
  /**
   * Whether spawn takes a first try's log as the log folder and a name (SpawnOptions.logToMake) and
   * makes the log itself, in the run's own process; a log that cannot be made there is made (or
   * refused, with why) on the agent's side before the run starts.
   */
  readonly makesLogs?: boolean;
  /** Follows the run's group to its end (exited: the wrapper's exit, null for an adopted run). */
  watch(group: RunGroup, statusFile: string, exited: Promise<ExitInfo | null> | null, onLingering: (pids: number[]) => void): RunWatch;
  /** Signals the group only while it is provably the run's; returns whether a signal was sent. */
  signal(group: RunGroup, signal: NodeJS.Signals): boolean;
  /** The live processes of the group while it is the run's. */
  members(group: RunGroup): number[];
  /** The group of a run whose spawn was recorded but whose pid was not (a crash in between), if it lives. */
  findGroup(runId: string): RunGroup | null;
  /** Whether the process recorded as the run's owner still lives (same pid and start time). */
  ownerAlive(run: StoredRun): boolean;
  /** What the wrapper recorded in the run's status file (unknown while there is none). */
  readStatus(statusFile: string): ExitInfo;
}

/**
 * Where a run's state and its telemetry go, together: `commit` resolves once both are durable (one
 * transaction, group-committed with the writes of other runs). It never rejects: a store that cannot
 * write keeps the newest state in memory and says so in its health (a fetcher must go on and finish
 * on a full disk).
 */
export interface RunJournal {
  /** `slotWaits`: a slot is held idle until this commit is durable (the commit goes without waiting for more writers). */
  commit(run: StoredRun, event: NewTelemetryEvent | null, slotWaits?: boolean): Promise<void>;
  /** An event without a state change (heartbeat, cancel request), in order with the commits. */
  record(event: NewTelemetryEvent): Promise<void>;
  get(runId: string): StoredRun | null;
  /** Runs left waiting or running, by any process. */
  active(): StoredRun[];
}

export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };
