import * as os from 'node:os';
import type { RunInfo, RunReason, RunStatus, WaitReason } from '../../shared/protocol';
import type { NewTelemetryEvent } from '../telemetry/telemetrySink';
import { runEventId } from './runEventId';
import type { Clock, RunJournal } from './runPorts';
import { toRunInfo, type StoredRun } from './runStore';

/**
 * The moves a run may make. A run enters `waiting` (or `skipped`, when it was due but not started);
 * `waiting → waiting` and `running → running` change what the run is doing (its wait, `starting`,
 * `lingering`); `running → waiting` is a GitHub sync hibernating (reason `hibernating`) and
 * `waiting → running` its resume. The last four states are final.
 */
export const RUN_MOVES: Readonly<Record<RunStatus | 'new', readonly RunStatus[]>> = {
  new: ['waiting', 'skipped'],
  waiting: ['waiting', 'running', 'failed', 'cancelled', 'skipped'],
  running: ['running', 'waiting', 'completed', 'failed', 'cancelled'],
  completed: [],
  failed: [],
  cancelled: [],
  skipped: [],
};

export const FINAL_STATES: readonly RunStatus[] = ['completed', 'failed', 'cancelled', 'skipped'];

/** A move the table does not allow: a bug in the caller, refused before anything changed. */
export class IllegalTransitionError extends Error {
  constructor(readonly runId: string, readonly from: RunStatus | 'new', readonly to: RunStatus) {
    super(`run ${runId} cannot move from ${from} to ${to}`);
    this.name = 'IllegalTransitionError';
  }
}

/** What a move may change besides the status. */
export type RunFields = Partial<Pick<StoredRun, 'startedAt' | 'finishedAt' | 'slot' | 'pid' | 'startTime' | 'exitCode' | 'signal' | 'logPath' | 'statusFile' | 'ownerPid' | 'ownerStartTime'
  | 'memoryMb' | 'peakMemoryMb' | 'cpuSeconds' | 'memoryLimitMb' | 'memorySource' | 'oomKills'>> & {
  reason?: RunReason | null;
  wait?: WaitReason | null;
};

/** Extra telemetry of a move: argv of a start, the message of a failure, pids still lingering. */
export type MoveDetail = Record<string, unknown>;

export interface TransitionPorts {
  journal: RunJournal;
  clock: Clock;
  publish(run: RunInfo): void;
}

/**
 * The one way a run changes state: checks the move against RUN_MOVES (throws IllegalTransitionError,
 * changing nothing), applies it to the run in memory at once (so a cancel that comes next sees it),
 * saves the state and spools the matching telemetry event in one durable commit, and publishes the
 * change after that commit. The returned promise resolves once the move is durable.
 */
export function transition(ports: TransitionPorts, run: StoredRun, to: RunStatus, fields: RunFields = {}, detail: MoveDetail = {}): Promise<void> {
  return move(ports, run, run.status, to, fields, detail);
}

/** Records a new run (entering `waiting` or `skipped`), through the same path as every move. */
export function enter(ports: TransitionPorts, run: StoredRun, detail: MoveDetail = {}): Promise<void> {
  return move(ports, run, 'new', run.status, {}, detail);
}

/** Throws (synchronously, before any change) on a move the table does not allow. */
function move(ports: TransitionPorts, run: StoredRun, from: RunStatus | 'new', to: RunStatus, fields: RunFields, detail: MoveDetail): Promise<void> {
  if (!RUN_MOVES[from].includes(to)) throw new IllegalTransitionError(run.runId, from, to);
  const before = from === 'new' ? null : { ...run };
  Object.assign(run, fields, { status: to });
  const after = { ...run };
  return ports.journal.commit(after, eventOf(before, after, detail, ports.clock)).then(() => ports.publish(toRunInfo(after)));
}

/** The telemetry event that goes with a move, or null when the move is not worth recording. */
function eventOf(before: StoredRun | null, after: StoredRun, detail: MoveDetail, clock: Clock): NewTelemetryEvent | null {
  const base = { runId: after.runId, task: after.fetcher, pool: after.pool };
  if (after.status === 'skipped') return { ...base, event: 'skipped', payload: { reason: after.reason, ...detail } };
  if (FINAL_STATES.includes(after.status)) {
    const end = after.finishedAt ? Date.parse(after.finishedAt) : clock.now().getTime();
    const durationSeconds = after.startedAt ? Math.max(0, (end - Date.parse(after.startedAt)) / 1000) : 0;
    // A run finishes once: the id is derived from the run, so a finish emitted again by an agent
    // that adopts the run after a crash makes no second row in PostgreSQL.
    return { ...base, event: 'finish', eventId: runEventId(after.runId, 'finish'), payload: { status: after.status, exitCode: after.exitCode, signal: after.signal, durationSeconds, reason: after.reason, message: null, ...detail } };
  }
  if (after.status === 'running' && before?.status === 'waiting') {
    if (before.reason === 'hibernating') return { ...base, event: 'resumed', payload: { slot: after.slot, ...detail } };
    return { ...base, event: 'start', eventId: runEventId(after.runId, 'start'), payload: { slot: after.slot, host: os.hostname(), pid: after.pid, trigger: after.trigger, ...detail } };
  }
  if (after.status === 'running' && after.reason === 'lingering' && before?.reason !== 'lingering') return { ...base, event: 'heartbeat', payload: { pid: after.pid, ...detail } };
  if (after.status === 'waiting' && before?.status === 'running' && after.reason === 'hibernating') return { ...base, event: 'hibernated', payload: { until: after.wait?.kind === 'hibernating' ? after.wait.until : null, ...detail } };
  if (after.status === 'waiting' && before?.status === 'running') return { ...base, event: 'waiting', payload: { reason: after.wait ?? after.reason, ...detail } };
  // Telemetry records that a run had to wait, and why, once: a run that starts at once has no
  // `waiting` event.
  if (after.status === 'waiting' && before?.status === 'waiting' && before.wait === null && after.wait !== null && before.startedAt === null) {
    return { ...base, event: 'waiting', payload: { trigger: after.trigger, args: after.args, reason: after.wait } };
  }
  return null;
}
