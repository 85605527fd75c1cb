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

/**
 * The named moves of a run's policies and of a queue kept across agents. Each leaves one of `from`
 * (and, where given, only when `when` holds of the run), goes to `to` (a move RUN_MOVES allows too)
 * and spools the event named here, if any; `named` refuses anything else with IllegalTransitionError.
 */
export const NAMED_MOVES = {
  /** A try ended and its policy retries it: its slot is released, the next try waits its backoff (reason `retry-backoff`, `wait: retry`); event `waiting`. */
  retryWait: { from: ['running'], to: 'waiting', event: 'waiting' },
  /** The backoff is over (or it passed while no agent ran): the next try queues for the disk gate and a slot. */
  retryWake: { from: ['waiting'], to: 'waiting', when: (r: StoredRun) => r.reason === 'retry-backoff', event: null },
  /** The try passed its deadline: reason `timeout` while its group gets TERM, then KILL after the grace. */
  deadline: { from: ['running'], to: 'running', event: null },
  /** The log has not grown for the entry's stallSeconds: `stalledSince` set; event `stalled`. */
  stall: { from: ['running'], to: 'running', when: (r: StoredRun) => !r.stalledSince, event: 'stalled' },
  /** The log of a stalled run grew again. */
  unstall: { from: ['running'], to: 'running', when: (r: StoredRun) => Boolean(r.stalledSince), event: null },
  /** A stalled run whose policy says `onStall: cancel`: reason `stalled` while its group gets TERM. */
  stallCancel: { from: ['running'], to: 'running', event: null },
  /** A run an agent left waiting (queued, at the disk gate, in its backoff) is this agent's now, as it was. */
  resume: { from: ['waiting'], to: 'waiting', when: (r: StoredRun) => r.reason !== 'starting', event: null },
  /** The agent stops between a run's slot grant and its spawn: the run goes back to waiting, slot given back. */
  park: { from: ['waiting'], to: 'waiting', event: null },
} as const satisfies Record<string, { from: readonly RunStatus[]; to: RunStatus; when?: (r: StoredRun) => boolean; event: string | null }>;

export type NamedMove = keyof typeof NAMED_MOVES;

/** A named move whose precondition does not hold: refused before anything changed. */
export class IllegalMoveError extends IllegalTransitionError {
  constructor(runId: string, readonly moveName: NamedMove, from: RunStatus) {
    super(runId, from, NAMED_MOVES[moveName].to);
    this.message = `run ${runId} cannot make the move ${moveName} from ${from}`;
  }
}

/** What a move may change besides the status. */
export type RunFields = Partial<Pick<StoredRun, 'startedAt' | 'finishedAt' | 'slot' | 'pid' | 'startTime' | 'exitCode' | 'signal' | 'logPath' | 'statusFile' | 'ownerPid' | 'ownerStartTime'
  | 'memoryMb' | 'peakMemoryMb' | 'cpuSeconds' | 'memoryLimitMb' | 'memorySource' | 'oomKills'
  | 'attempt' | 'attempts' | 'deadline' | 'logGrewAt' | 'stalledSince' | 'waitSince' | 'ownerRole' | 'workLeftMs'>> & {
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

/** A named move (NAMED_MOVES), through the same path as every move; throws IllegalMoveError when it does not apply. */
export function named(ports: TransitionPorts, run: StoredRun, name: NamedMove, fields: RunFields = {}, detail: MoveDetail = {}): Promise<void> {
  const spec: { from: readonly RunStatus[]; to: RunStatus; when?: (r: StoredRun) => boolean; event: string | null } = NAMED_MOVES[name];
  if (!spec.from.includes(run.status) || (spec.when && !spec.when(run))) throw new IllegalMoveError(run.runId, name, run.status);
  return move(ports, run, run.status, spec.to, fields, detail, name);
}

/** Throws (synchronously, before any change) on a move the table does not allow. */
function move(ports: TransitionPorts, run: StoredRun, from: RunStatus | 'new', to: RunStatus, fields: RunFields, detail: MoveDetail, name?: NamedMove): Promise<void> {
  if (!RUN_MOVES[from].includes(to)) throw new IllegalTransitionError(run.runId, from, to);
  const before = from === 'new' ? null : { ...run };
  Object.assign(run, fields, { status: to });
  const after = { ...run };
  const event = name === undefined ? eventOf(before, after, detail, ports.clock) : namedEventOf(name, after, detail);
  return ports.journal.commit(after, event).then(() => ports.publish(toRunInfo(after)));
}

function namedEventOf(name: NamedMove, after: StoredRun, detail: MoveDetail): NewTelemetryEvent | null {
  const event = NAMED_MOVES[name].event;
  if (event === null) return null;
  const base = { runId: after.runId, task: after.fetcher, pool: after.pool };
  if (name === 'stall') return { ...base, event, payload: { attempt: after.attempt ?? 1, logGrewAt: after.logGrewAt ?? null, stalledSince: after.stalledSince ?? null, ...detail } };
  return { ...base, event, payload: { reason: after.wait ?? after.reason, attempt: after.attempt ?? 1, exitCode: after.exitCode, signal: after.signal, ...detail } };
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
    return { ...base, event: 'finish', eventId: runEventId(after.runId, 'finish'), payload: { status: after.status, exitCode: after.exitCode, signal: after.signal, durationSeconds, reason: after.reason, message: null, attempt: after.attempt ?? 1, ...detail } };
  }
  if (after.status === 'running' && before?.status === 'waiting') {
    if (before.reason === 'hibernating') return { ...base, event: 'resumed', payload: { slot: after.slot, ...detail } };
    // Each try starts once: the first keeps the id a run without retries has, later ones get their own.
    const attempt = after.attempt ?? 1;
    return { ...base, event: 'start', eventId: runEventId(after.runId, attempt === 1 ? 'start' : `start-${attempt}`), payload: { slot: after.slot, host: os.hostname(), pid: after.pid, trigger: after.trigger, attempt, ...detail } };
  }
  if (after.status === 'running' && after.reason === 'lingering' && before?.reason !== 'lingering') return { ...base, event: 'heartbeat', payload: { pid: after.pid, logGrewAt: after.logGrewAt ?? null, ...detail } };
  if (after.status === 'waiting' && before?.status === 'running' && after.reason === 'hibernating') return { ...base, event: 'hibernated', payload: { until: after.wait?.kind === 'hibernating' ? after.wait.until : null, ...detail } };
  if (after.status === 'waiting' && before?.status === 'running') return { ...base, event: 'waiting', payload: { reason: after.wait ?? after.reason, ...detail } };
  // Telemetry records that a run had to wait, and why, once: a run that starts at once has no
  // `waiting` event.
  if (after.status === 'waiting' && before?.status === 'waiting' && before.wait === null && after.wait !== null && before.startedAt === null) {
    return { ...base, event: 'waiting', payload: { trigger: after.trigger, args: after.args, reason: after.wait } };
  }
  return null;
}
