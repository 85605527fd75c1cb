import { RUN_REASONS, type RunInfo, type RunReason, type RunStatus, type WaitReason } from '../../shared/protocol';
import type { NewTelemetryEvent } from '../telemetry/telemetrySink';
import { hostName } from './hostName';
import { runEventId } from './runEventId';
import type { Clock, RunJournal } from './runPorts';
import { toRunInfo, type StoredRun } from './runStore';

type Reason = RunReason | null;

// A run's sub-states: the reasons a live run may have, by status. A waiting run is queued (null), at
// its spawn (`starting`), in a retry backoff or hibernating (a GitHub sync between legs); a running
// one runs (null), outlives its wrapper (`lingering`) or is being stopped for its deadline or a stall.
const WAITING: readonly Reason[] = [null, 'starting', 'retry-backoff', 'hibernating'];
const RUNNING: readonly Reason[] = [null, 'lingering', 'timeout', 'stalled'];
const LIVE_ONLY: readonly Reason[] = ['starting', 'lingering', 'hibernating', 'retry-backoff'];
/** The reasons a run may end with: any but a live sub-state (a GitHub sync's end may carry none). */
const END_REASONS: readonly Reason[] = [null, ...RUN_REASONS.filter((r) => !LIVE_ONLY.includes(r))];
/** Adoption takes a run as the dead agent left it, whatever it was doing. */
const ANY: readonly Reason[] = [null, ...RUN_REASONS];

/** What a move's event is built from: the run before (null for a new run) and after the move, and the caller's detail. */
interface MoveContext {
  before: StoredRun | null;
  after: StoredRun;
  detail: MoveDetail;
  clock: Clock;
}

interface MoveSpec {
  /** The states the move may leave: each status with the reasons the run may have in it (`new`: a run not recorded yet). */
  from: Partial<Record<RunStatus | 'new', readonly Reason[]>>;
  to: RunStatus;
  /** The reasons the run may have after the move (the one the fields set, or the one it keeps). */
  reasons: readonly Reason[];
  /** A further precondition on the run, when the states alone do not say it. */
  when?: (run: StoredRun) => boolean;
  /** The telemetry event the move spools with its state, or null. */
  event: (m: MoveContext) => NewTelemetryEvent | null;
  /** false: progress within a state, kept in memory only (neither committed nor published by the move). */
  durable?: false;
  /**
   * A slot is held idle until the move is durable: its commit goes on the event loop's next turn with
   * what has gathered, not after the group commit's window for more writers.
   */
  slotWaits?: true;
}

const none = (): null => null;
const base = (run: StoredRun) => ({ runId: run.runId, task: run.fetcher, pool: run.pool });

/** A run finishes once: the id is derived from the run, so a finish emitted again by an agent that adopts the run after a crash makes no second row in PostgreSQL. */
function finishEvent({ after, detail, clock }: MoveContext): NewTelemetryEvent {
  const end = after.finishedAt ? Date.parse(after.finishedAt) : clock.now().getTime();
  const durationSeconds = after.startedAt ? Math.max(0, (end - Date.parse(after.startedAt)) / 1000) : 0;
  return {
    ...base(after),
    event: 'finish',
    eventId: runEventId(after.runId, 'finish'),
    payload: {
      status: after.status,
      exitCode: after.exitCode,
      signal: after.signal,
      durationSeconds,
      reason: after.reason,
      message: null,
      attempt: after.attempt ?? 1,
      ...detail,
    },
  };
}

/** Each try starts once: the first keeps the id a run without retries has, later ones get their own. */
function startEvent({ after, detail }: MoveContext): NewTelemetryEvent {
  const attempt = after.attempt ?? 1;
  return {
    ...base(after),
    event: 'start',
    eventId: runEventId(after.runId, attempt === 1 ? 'start' : `start-${attempt}`),
    payload: { slot: after.slot, host: hostName(), pid: after.pid, trigger: after.trigger, attempt, ...detail },
  };
}

/**
 * Every move a run makes, by name: the states it may leave, the state it enters, the reasons it may
 * carry there and the event it emits. `transition` refuses anything else with IllegalMoveError before
 * anything changes. `completed`, `failed`, `cancelled` and `skipped` are final: no move leaves them.
 */
export const RUN_MOVES = {
  /** A new run queues: waiting for the disk gate and a slot. */
  enqueue: { from: { new: [null] }, to: 'waiting', reasons: [null], event: none },
  /** A run that was due but not started (the schedule's "already running"); event `skipped`. */
  skip: {
    from: { new: [null] },
    to: 'skipped',
    reasons: END_REASONS,
    event: ({ after, detail }) => ({ ...base(after), event: 'skipped', payload: { reason: after.reason, ...detail } }),
  },
  /**
   * Why a queued (or waking) run still waits changes kind: the disk gate, the pool, the slot backend.
   * Telemetry records that a run had to wait, and why, once: event `waiting` on the first wait of a run never started.
   */
  wait: {
    from: { waiting: [null, 'hibernating'] },
    to: 'waiting',
    reasons: [null, 'hibernating'],
    event: ({ before, after }) =>
      before?.wait === null && after.wait !== null && before.startedAt === null
        ? { ...base(after), event: 'waiting', payload: { trigger: after.trigger, args: after.args, reason: after.wait } }
        : null,
  },
  /** The run's place in its pool's queue moved: progress within `waiting`, published at most once a second (queuePositions.ts). */
  shift: { from: { waiting: [null, 'hibernating'] }, to: 'waiting', reasons: [null, 'hibernating'], event: none, durable: false },
  /** The run has its slot: the spawn's intent (slot, status file, log) is durable before the spawn, which the slot waits for. */
  markStarting: { from: { waiting: [null] }, to: 'waiting', reasons: ['starting'], event: none, slotWaits: true },
  /** The spawn made the run's process: its pid, in memory until `start` commits it (a failure from here leaves the slot to the run's end). */
  spawned: { from: { waiting: ['starting'] }, to: 'waiting', reasons: ['starting'], event: none, durable: false },
  /** The run runs: its process spawned (or found after a crash), or in-agent work took its slot; event `start`. */
  start: { from: { waiting: [null, 'starting'] }, to: 'running', reasons: [null], event: startEvent },
  /** The wrapper ended but processes of the run live on and hold its slot; event `heartbeat` with their pids. */
  linger: {
    from: { running: [null] },
    to: 'running',
    reasons: ['lingering'],
    event: ({ after, detail }) => ({
      ...base(after),
      event: 'heartbeat',
      payload: { pid: after.pid, logGrewAt: after.logGrewAt ?? null, ...detail },
    }),
  },
  /** Which processes linger changed. */
  lingerOn: { from: { running: ['lingering'] }, to: 'running', reasons: ['lingering'], event: none },
  /** A GitHub sync's leg ended with work left: its slot is released until the wake-up time; event `hibernated`. */
  hibernate: {
    from: { running: [null] },
    to: 'waiting',
    reasons: ['hibernating'],
    event: ({ after, detail }) => ({
      ...base(after),
      event: 'hibernated',
      payload: { until: after.wait?.kind === 'hibernating' ? after.wait.until : null, ...detail },
    }),
  },
  /**
   * A GitHub sync's storage went away mid-leg (a database restart, a full disk): its slot is released and
   * it waits (`wait: storage`, reason `hibernating`: between legs) until a probe finds the storage back,
   * then wakes like a hibernation; event `waiting` with the wait. Never a failure for a transient loss.
   */
  awaitStorage: {
    from: { running: [null] },
    to: 'waiting',
    reasons: ['hibernating'],
    event: ({ after, detail }) => ({ ...base(after), event: 'waiting', payload: { reason: after.wait, ...detail } }),
  },
  /** A hibernating sync got a slot again for its next leg; event `resumed`. */
  wake: {
    from: { waiting: ['hibernating'] },
    to: 'running',
    reasons: [null],
    event: ({ after, detail }) => ({ ...base(after), event: 'resumed', payload: { slot: after.slot, ...detail } }),
  },
  /** A try ended and its policy retries it: its slot is released, the next try waits its backoff (`wait: retry`); event `waiting`. */
  retryWait: {
    from: { running: RUNNING },
    to: 'waiting',
    reasons: ['retry-backoff'],
    event: ({ after, detail }) => ({
      ...base(after),
      event: 'waiting',
      payload: {
        reason: after.wait ?? after.reason,
        attempt: after.attempt ?? 1,
        exitCode: after.exitCode,
        signal: after.signal,
        ...detail,
      },
    }),
  },
  /** The backoff is over (or it passed while no agent ran): the next try queues for the disk gate and a slot. */
  retryWake: { from: { waiting: ['retry-backoff'] }, to: 'waiting', reasons: [null], event: none },
  /** The try passed its deadline: reason `timeout` while its group gets TERM, then KILL after the grace. */
  deadline: { from: { running: RUNNING }, to: 'running', reasons: ['timeout'], event: none },
  /** The log has not grown for the entry's stallSeconds: `stalledSince` set; event `stalled`. */
  stall: {
    from: { running: RUNNING },
    to: 'running',
    reasons: RUNNING,
    when: (r: StoredRun) => !r.stalledSince,
    event: ({ after, detail }) => ({
      ...base(after),
      event: 'stalled',
      payload: { attempt: after.attempt ?? 1, logGrewAt: after.logGrewAt ?? null, stalledSince: after.stalledSince ?? null, ...detail },
    }),
  },
  /** The log of a stalled run grew again. */
  unstall: { from: { running: RUNNING }, to: 'running', reasons: RUNNING, when: (r: StoredRun) => Boolean(r.stalledSince), event: none },
  /** The log grew (the stall watchdog's clock): progress within `running`, sent with the next heartbeat. */
  logGrew: { from: { running: ANY }, to: 'running', reasons: ANY, event: none, durable: false },
  /**
   * The agent stops while a run it cancelled still runs (the fetcher's cleanup after its SIGTERM): the
   * request goes with the run's state, and the agent that adopts it ends it `cancelled`. (The request
   * itself is an event, `cancel-requested`; a run cancelled while its spawn was on its way carries it
   * from its `start`.)
   */
  askCancel: { from: { running: RUNNING }, to: 'running', reasons: RUNNING, when: (r: StoredRun) => !r.cancelAsked, event: none },
  /** A stalled run whose policy says `onStall: cancel`: reason `stalled` while its group gets TERM. */
  stallCancel: { from: { running: [null, 'lingering', 'stalled'] }, to: 'running', reasons: ['stalled'], event: none },
  /** A run an agent left waiting (queued, at the disk gate, in its backoff) is this agent's now, as it was. */
  resume: { from: { waiting: [null, 'retry-backoff'] }, to: 'waiting', reasons: [null, 'retry-backoff'], event: none },
  /** A run an agent left running (its group alive, or its status file to read) is this agent's now. */
  adopt: { from: { running: ANY }, to: 'running', reasons: ANY, event: none },
  /** A sync an agent left hibernating is this agent's now; it wakes at its time. */
  adoptHibernating: { from: { waiting: ['hibernating'] }, to: 'waiting', reasons: ['hibernating'], event: none },
  /** The agent stops between a run's slot grant and its spawn: the run goes back to the head of the queue, slot given back. */
  park: { from: { waiting: ['starting'] }, to: 'waiting', reasons: [null], event: none },
  /** The run's end: exit 0 (a sync: done, maybe with repositories not reached); event `finish`. */
  complete: { from: { running: RUNNING }, to: 'completed', reasons: END_REASONS, event: finishEvent },
  /** The run's end: it failed, or was refused before it started; event `finish`. */
  fail: { from: { waiting: WAITING, running: RUNNING }, to: 'failed', reasons: END_REASONS, event: finishEvent },
  /** The run's end: cancelled by a client, by the agent stopping, or by its stall policy; event `finish`. */
  cancel: { from: { waiting: WAITING, running: RUNNING }, to: 'cancelled', reasons: END_REASONS, event: finishEvent },
} as const satisfies Record<string, MoveSpec>;

export type RunMove = keyof typeof RUN_MOVES;
/** The moves kept in memory only. */
export type ProgressMove = { [K in RunMove]: (typeof RUN_MOVES)[K] extends { durable: false } ? K : never }[RunMove];
export type DurableMove = Exclude<RunMove, ProgressMove>;

/** The move that ends a run in each final status a run reaches after it was queued. */
export const FINISH_MOVES = { completed: 'complete', failed: 'fail', cancelled: 'cancel' } as const satisfies Record<string, DurableMove>;

/** A move whose precondition does not hold (the state it leaves, the reason it carries, its guard): a bug in the caller, refused before anything changed. */
export class IllegalMoveError extends Error {
  constructor(
    readonly runId: string,
    readonly move: RunMove,
    readonly from: RunStatus | 'new',
    readonly reason: Reason,
    why: string,
  ) {
    super(`run ${runId} cannot make the move ${move} from ${from}${reason === null ? '' : ` (${reason})`}: ${why}`);
    this.name = 'IllegalMoveError';
  }
}

/** What a move may change besides the status. */
export type RunFields = Partial<
  Pick<
    StoredRun,
    | 'startedAt'
    | 'finishedAt'
    | 'slot'
    | 'pid'
    | 'startTime'
    | 'exitCode'
    | 'signal'
    | 'logPath'
    | 'statusFile'
    | 'ownerPid'
    | 'ownerStartTime'
    | 'memoryMb'
    | 'peakMemoryMb'
    | 'cpuSeconds'
    | 'memoryLimitMb'
    | 'memorySource'
    | 'oomKills'
    | 'attempt'
    | 'attempts'
    | 'deadline'
    | 'logGrewAt'
    | 'stalledSince'
    | 'waitSince'
    | 'ownerRole'
    | 'workLeftMs'
    | 'cancelAsked'
  >
> & {
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
 * The one way a run changes state: checks the move against RUN_MOVES (throws IllegalMoveError,
 * changing nothing), applies it to the run in memory at once (so a cancel that comes next sees it),
 * saves the state and spools the move's telemetry event in one durable commit, and publishes the
 * change after that commit. The returned promise resolves once the move is durable. `enqueue` and
 * `skip` record a run made by `draft`.
 */
export function transition(
  ports: TransitionPorts,
  run: StoredRun,
  name: DurableMove,
  fields: RunFields = {},
  detail: MoveDetail = {},
): Promise<void> {
  const spec: MoveSpec = RUN_MOVES[name];
  // The run as it was, for the move's event (a move that apply refuses changes nothing).
  const before = drafts.has(run) ? null : { ...run };
  apply(run, name, fields);
  const after = { ...run };
  return ports.journal
    .commit(after, spec.event({ before, after, detail, clock: ports.clock }), spec.slotWaits === true)
    .then(() => ports.publish(toRunInfo(after)));
}

/** A move kept in memory only (RUN_MOVES entries with `durable: false`), checked like every move. */
export function note(run: StoredRun, name: ProgressMove, fields: RunFields): void {
  apply(run, name, fields);
}

/** Runs made by `draft` whose first move has not been made yet: the only runs in state `new`. */
const drafts = new WeakSet<StoredRun>();

/** A run not recorded yet (its fields as given): its first move, `enqueue` or `skip`, records it. */
export function draft(run: StoredRun): StoredRun {
  drafts.add(run);
  return run;
}

/**
 * Checks the move (throws before any change) and applies it. It copies nothing: a queue's shifts
 * run once per waiting run per grant.
 */
function apply(run: StoredRun, name: RunMove, fields: RunFields): void {
  const spec: MoveSpec = RUN_MOVES[name];
  const fresh = drafts.has(run);
  const from = fresh ? 'new' : run.status;
  const reason = fresh ? null : run.reason;
  const leaves = spec.from[from];
  if (leaves === undefined || !leaves.includes(reason))
    throw new IllegalMoveError(run.runId, name, from, reason, 'it does not leave this state');
  if (spec.when && !spec.when(run)) throw new IllegalMoveError(run.runId, name, from, reason, 'its guard does not hold');
  const next = 'reason' in fields ? (fields.reason ?? null) : reason;
  if (!spec.reasons.includes(next))
    throw new IllegalMoveError(run.runId, name, from, reason, `it does not carry the reason ${String(next)}`);
  Object.assign(run, fields, { status: spec.to });
  drafts.delete(run);
}
