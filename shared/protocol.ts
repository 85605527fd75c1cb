// The agent's protocol: JSON-RPC 2.0 over a WebSocket. Both the agent and the extension import this
// file; it must not import `vscode` or any Node-only module.
//
// State travels as a versioned snapshot plus ordered change events: every change bumps
// `Snapshot.version` by exactly one and is pushed as `ChangedNotification` carrying that version, so a
// client applies version N+1 on top of N and asks for a new snapshot on any gap.
//
// Each message is declared once, as a vscode-jsonrpc `RequestType`/`NotificationType` constant
// (`Hello.type`, …); every sender and receiver passes that constant, so params and results are
// checked where they are used, and the agent's param schemas are checked against the same types.

import { NotificationType, ProgressType, RequestType, RequestType0 } from 'vscode-jsonrpc';

export const PROTOCOL_VERSION = 1;

export type PoolName = 'heavy-io' | 'cpu-analysis' | 'network-light';
export const POOL_NAMES: readonly PoolName[] = ['heavy-io', 'cpu-analysis', 'network-light'];

/** Pool name used for every fetcher in serial compatibility mode (CRON_USE_POOLS=false). */
export const SERIAL_POOL = 'serial';

export type RunStatus = 'waiting' | 'running' | 'completed' | 'failed' | 'cancelled' | 'skipped';
export type RunTrigger = 'cli' | 'protocol' | 'schedule' | 'catch-up' | 'adopted';

/**
 * Why a run is in its state: why it failed, was cancelled or skipped, or what a live run is doing
 * (`starting`: its spawn is recorded but not yet confirmed; `lingering`: its wrapper ended but
 * processes of the run still hold the slot; `hibernating`: a GitHub sync waiting for its rate limit).
 * Always one of these tokens, never prose: clients switch on them.
 */
export const RUN_REASONS = [
  'wait-timeout', 'disk-backpressure-timeout', 'admission-impossible', 'no-such-pool',
  'lock-file-unsafe', 'lock-dir-unsafe', 'lock-group-unknown', 'slot-error', 'start-error',
  'exit-code', 'signal', 'exit-status-unknown', 'memory-limit',
  'cancelled', 'agent-stopping', 'owner-exited-while-waiting', 'already-active',
  'starting', 'lingering', 'hibernating',
  // A GitHub sync's ends: completed with repositories not reached, or failed with its sync's reason.
  'repos-not-reached', 'repos-file-invalid', 'github-sync-unavailable', 'storage-error', 'stuck-no-progress',
  'unknown-sync', 'no-repositories', 'sync-completed', 'sync-failed', 'sync-cancelled',
  // The postgres slot backend: its database cannot be reached; a run's slot session was lost.
  'slot-backend-unavailable', 'slot-session-lost',
  // Run policies: a try failed and the next one waits its backoff; the run passed its deadline; its log
  // stopped growing for its stall limit (and the policy cancels it).
  'retry-backoff', 'timeout', 'stalled',
  // A GitHub sync whose token the API refused (401).
  'unauthorized',
] as const;
export type RunReason = (typeof RUN_REASONS)[number];

/** Why a waiting run has not started yet. */
export type WaitReason =
  | { kind: 'pool'; position: number }
  | { kind: 'disk'; state: DiskGateState; freeGb: number | null; resumeGb: number }
  | { kind: 'admission'; freeGb: number; reservedGb: number; pauseGb: number }
  | { kind: 'hibernating'; until: string }
  /** Between two tries of a run under a retry policy: the next try (`attempt`, 1-based) at `until`. */
  | { kind: 'retry'; until: string; attempt: number }
  /** The postgres slot backend cannot take a slot now: its database is down, or at its connection cap. */
  | { kind: 'slot-backend'; cause: 'unreachable' | 'connection-cap' };

export interface RunInfo {
  runId: string;
  fetcher: string;
  pool: string;
  status: RunStatus;
  trigger: RunTrigger;
  args: string[];
  enqueuedAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  slot: number | null;
  pid: number | null;
  exitCode: number | null;
  signal: string | null;
  /** Why the run failed, was cancelled or skipped, or what a live run is doing (see RunReason). */
  reason: RunReason | null;
  wait: WaitReason | null;
  logPath: string | null;
  // memory ceilings: optional, so older agents and clients keep working.
  /** Memory the run uses now (MB), while it runs. */
  memoryMb?: number | null;
  /** The most the run has used (MB): from its cgroup, or sampled from /proc (memorySource). */
  peakMemoryMb?: number | null;
  /** CPU time of the run's processes (user + system). */
  cpuSeconds?: number | null;
  /** The run's own ceiling (the catalog's memoryMb) or else its pool's; null when none is enforced. */
  memoryLimitMb?: number | null;
  memorySource?: MemorySource;
  /** The try this is (1-based) and how many the run's retry policy allows (1 without a policy). */
  attempt?: number;
  attempts?: number;
  /** When the run's timeout ends it (its deadline), while it runs under one. */
  deadline?: string | null;
  /** When the run's log last grew (the stall watchdog's clock), while it runs. */
  logGrewAt?: string | null;
  /** Since when the run is stalled (its log has not grown for its stallSeconds), or null. */
  stalledSince?: string | null;
  /** OOM kills the run's cgroup counted (a child killed at the ceiling), also when the run exited 0. */
  oomKills?: number | null;
}

// memory ceilings
/** Where a run's memory figures come from: its cgroup, or samples of /proc (no cgroup: not enforced). */
export type MemorySource = 'cgroup' | 'sampled';
export type MemoryEnforcementKind = 'cgroup-v1' | 'cgroup-v2' | 'not-enforced';

/** Whether memory ceilings are enforced on this station, and why not when they are not. */
export interface MemoryEnforcement {
  kind: MemoryEnforcementKind;
  /** A token saying why ceilings are not enforced (`cgroup-v1-not-writable`, …); null when enforced. */
  reason: string | null;
  /** Set when the pools' ceilings and the reserve add up to more than the machine's RAM. */
  budgetWarning: string | null;
}

/** A pool's memory: what its runs use now against its ceiling. */
export interface PoolMemory {
  usedMb: number | null;
  ceilingMb: number;
  enforcement: MemoryEnforcementKind;
}

/** Who holds a slot; read from the lock file's owner record and checked against /proc. */
export interface SlotHolder {
  pid: number;
  runId: string | null;
  fetcher: string | null;
  since: string | null;
  /** True when the holder is not a run of this agent (a legacy `flock` script, another agent). */
  foreign: boolean;
  /** With the postgres slot backend, the station that holds the slot. */
  station?: string;
}

export interface SlotState {
  pool: string;
  index: number;
  lockPath: string;
  holder: SlotHolder | null;
}

export interface PoolState {
  name: string;
  size: number;
  used: number;
  waiting: number;
  waitTimeoutSeconds: number;
  slots: SlotState[];
  /** memory ceilings */
  memory?: PoolMemory;
}

export type DiskGateState = 'ok' | 'warn' | 'paused' | 'unknown';

export interface DiskStatus {
  state: DiskGateState;
  path: string;
  freeGb: number | null;
  totalGb: number | null;
  warnGb: number;
  pauseGb: number;
  resumeGb: number;
  /** The threshold whose crossing changes the state next, and how far away it is. */
  next: { threshold: 'warn' | 'pause' | 'resume'; gb: number; distanceGb: number } | null;
  error: string | null;
  checkedAt: string;
}

export interface SpoolStatus {
  path: string | null;
  fallback: boolean;
  pending: number;
  oldestAgeSeconds: number | null;
  lastFlushAt: string | null;
  lastFlushError: string | null;
  lost: number;
  database: 'connected' | 'down' | 'not-configured';
  /** The spool's own trouble: a corrupt file moved aside, an unwritable path. */
  error: string | null;
  /** Events the flush could not send (invalid, or refused by PostgreSQL), kept aside in the spool. */
  quarantined?: number;
  /** Events kept in memory because no spool file takes them now (a full disk); counted in `pending`. */
  held?: number;
}

export interface ScheduleEntry {
  fetcher: string;
  cron: string | null;
  timezone: string | null;
  nextDue: string | null;
  paused: boolean;
  lastRunAt: string | null;
  /** The dead man's switch: minutes after a due time within which a run must complete (null: none). */
  lateAfterMinutes?: number | null;
  /** Since when the entry is late (a due time passed without a completed run in time), or null. */
  lateSince?: string | null;
  /** The last completed run of the entry, if any. */
  lastSuccessAt?: string | null;
}

/**
 * What an operator is told outside VS Code: the event hook (QUANTILICA_ON_EVENT), `quantilica events`
 * and the metrics. Tokens, never prose.
 */
export const OPERATOR_EVENTS = [
  'failed', 'retrying', 'timeout', 'stalled', 'late', 'recovered',
  'disk-paused', 'disk-resumed', 'sync-hibernated', 'sync-not-reached',
] as const;
export type OperatorEventName = (typeof OPERATOR_EVENTS)[number];

export interface OperatorEvent {
  event: OperatorEventName;
  at: string;
  runId: string | null;
  fetcher: string | null;
  pool: string | null;
  exitCode: number | null;
  reason: string | null;
  attempt: number | null;
  logPath: string | null;
}

export interface ScheduleStatus {
  paused: boolean;
  catchUp: boolean;
  entries: ScheduleEntry[];
}

export interface AgentInfo {
  pid: number;
  host: string;
  startedAt: string;
  protocolVersion: number;
  mode: 'pools' | 'serial';
  dataDir: string;
  lockDir: string;
  /** memory ceilings */
  memory?: MemoryEnforcement;
  /** The postgres slot backend as this process sees it (absent with the file backend). */
  slotBackend?: SlotBackendStatus;
  /** Present when slots or runs of the other mode are held (another process has the other CRON_USE_POOLS). */
  otherMode?: OtherModeHolders;
}

/** Whether the shared slot database can give slots now, and what weakens it. */
export interface SlotBackendStatus {
  /** `ok`, or why no slot can be taken now (runs wait with the same cause). */
  state: 'ok' | 'unreachable' | 'connection-cap';
  /** The last error behind a state other than `ok`. */
  error: string | null;
  /** PUBLIC may connect to the slot database, so any role can take its advisory locks (null: not known yet). */
  publicConnect: boolean | null;
}

/** Holders of the mode this agent (or CLI) is not in: lock files the kernel lists as held, active runs. */
export interface OtherModeHolders {
  mode: 'pools' | 'serial';
  lockFiles: string[];
  runs: string[];
}

export interface CatalogEntryInfo {
  name: string;
  /** Absent: a fetcher (agents before the GitHub sync). */
  kind?: 'fetcher' | 'github-sync';
  pool: string;
  aliases: string[];
  demo: boolean;
}

export type GithubStage = 'changes' | 'checks';
export type GithubBudget = 'graphql' | 'core';

/** One stage of a GitHub sync: repositories done, not reached (each with its reason token), of all. */
export interface GithubStageProgress {
  done: number;
  notReached: number;
  total: number;
  notReachedRepos: Array<{ repo: string; reason: string }>;
}

/** The GitHub sync the agent runs or ran last (`quantilica github status`); never holds the token. */
export interface GithubSyncInfo {
  syncId: string;
  /** The agent's run of it and its catalog entry; null for a sync the agent did not run (a CLI's). */
  runId: string | null;
  fetcher: string | null;
  demo: boolean;
  status: 'running' | 'completed' | 'failed' | 'cancelled';
  reason: string | null;
  startedAt: string;
  finishedAt: string | null;
  /** `requests_core` and `requests_graphql` split `requests_made` by budget (absent from an agent that did not count them). */
  counters: { records_collected: number; records_created: number; requests_made: number; requests_saved: number; hibernations: number; requests_core?: number; requests_graphql?: number };
  stages: Record<GithubStage, GithubStageProgress>;
  /** Set while the sync hibernates: when it wakes, and which budget it waits for. */
  hibernatingUntil: string | null;
  budget: GithubBudget | null;
  quota: Partial<Record<GithubBudget, { remaining: number; limit: number; resetAt: string }>>;
}

export interface Snapshot {
  version: number;
  agent: AgentInfo;
  catalog: CatalogEntryInfo[];
  pools: PoolState[];
  /** Active runs (waiting, running) and the most recent finished ones. */
  runs: RunInfo[];
  disk: DiskStatus | null;
  spool: SpoolStatus | null;
  schedule: ScheduleStatus | null;
  /** The GitHub sync (absent from agents that predate it). */
  sync?: GithubSyncInfo | null;
}

export type Change =
  | { kind: 'run'; run: RunInfo }
  | { kind: 'pool'; pool: PoolState }
  | { kind: 'disk'; disk: DiskStatus }
  | { kind: 'spool'; spool: SpoolStatus }
  | { kind: 'schedule'; schedule: ScheduleStatus }
  | { kind: 'sync'; sync: GithubSyncInfo };

export interface ChangedParams {
  version: number;
  change: Change;
}

/** Error codes of JSON-RPC errors the agent returns (besides JSON-RPC's own). */
export const ErrorCodes = {
  unknownFetcher: -32002,
  unknownRun: -32003,
  invalidArgument: -32004,
  protocolVersion: -32005,
  unavailable: -32006,
  /** A request other than `quantilica/hello` arrived before a successful hello. */
  handshakeRequired: -32007,
} as const;

/**
 * What a running agent writes to its connection file (mode 0600): where to connect, the token the
 * upgrade's challenge proves knowledge of, and who wrote it.
 */
export interface ConnectionInfo {
  port: number;
  token: string;
  pid: number;
  protocolVersion: number;
  /** The agent's uid, its process start time (clock ticks after boot) and the boot it ran in: with
   * the pid they name the agent's process, so clients tell a live agent from a stale file. */
  uid?: number;
  startTime?: number;
  bootId?: string;
}

/**
 * The value of `$/progress` notifications for a flush's work-done token, shaped like LSP's
 * WorkDoneProgress (begin / report / end) plus the counts.
 */
export interface FlushProgress {
  kind: 'begin' | 'report' | 'end';
  title?: string;
  message: string;
  /** 0–100 when the total is known. */
  percentage?: number;
  sent: number;
  remaining: number;
}

// One namespace per message: the literal method name, its params and result.

export namespace Hello {
  // client → agent, first message: protocol version check; answers with the current snapshot.
  export const method = 'quantilica/hello' as const;
  export interface Params { protocolVersion: number; client: string }
  export interface Result { protocolVersion: number; snapshot: Snapshot }
  export const type = new RequestType<Params, Result, void>(method);
}

export namespace Initialize {
  // client → agent: LSP's lifecycle handshake, which vscode-languageclient sends before anything
  // else. The agent has no LSP capabilities; `quantilica/hello` follows and does the real handshake.
  export const method = 'initialize' as const;
  export interface Result { capabilities: Record<string, never>; serverInfo: { name: string; version: string } }
  /** LSP's InitializeParams; the agent reads none of them. */
  export type Params = Record<string, unknown>;
  export const type = new RequestType<Params, Result, void>(method);
}

export namespace Shutdown {
  // client → agent: LSP's lifecycle end (vscode-languageclient's stop); the agent goes on serving others.
  export const method = 'shutdown' as const;
  export const type = new RequestType0<null, void>(method);
}

export namespace GetSnapshot {
  // client → agent: the whole state (used to resynchronise after a gap in versions).
  export const method = 'quantilica/snapshot' as const;
  export type Result = Snapshot;
  export const type = new RequestType0<Result, void>(method);
}

export namespace RunFetcher {
  // client → agent: enqueue a run of a catalog fetcher (by name, never a command line).
  export const method = 'quantilica/run' as const;
  export interface Params { fetcher: string; args?: string[]; trigger?: 'cli' | 'protocol' }
  export interface Result { run: RunInfo }
  export const type = new RequestType<Params, Result, void>(method);
}

export namespace WaitRun {
  // client → agent: resolves when the run has finished (completed, failed, cancelled, skipped).
  export const method = 'quantilica/waitRun' as const;
  export interface Params { runId: string }
  export interface Result { run: RunInfo }
  export const type = new RequestType<Params, Result, void>(method);
}

export namespace CancelRun {
  // client → agent: cancel a run by id, or every active run of a fetcher.
  export const method = 'quantilica/cancel' as const;
  export interface Params { runId?: string; fetcher?: string }
  export interface Result { cancelled: RunInfo[] }
  export const type = new RequestType<Params, Result, void>(method);
}

export namespace ListRuns {
  // client → agent: recent runs, newest first.
  export const method = 'quantilica/runs' as const;
  export interface Params { limit?: number }
  export interface Result { runs: RunInfo[] }
  /** Params may be left out: the default limit. */
  export const type = new RequestType<Params | undefined, Result, void>(method);
}

export namespace TailLog {
  // client → agent: the last bytes of a run's log file.
  export const method = 'quantilica/tailLog' as const;
  export interface Params { runId: string; maxBytes?: number }
  export interface Result { runId: string; path: string; text: string; truncated: boolean }
  export const type = new RequestType<Params, Result, void>(method);
}

export namespace FlushTelemetry {
  // client → agent: send spooled telemetry to PostgreSQL now; reports work-done progress (sent / remaining).
  export const method = 'quantilica/flush' as const;
  export interface Params { workDoneToken?: string | number }
  export interface Result { sent: number; remaining: number; error: string | null }
  /** Params may be left out: no progress reported. */
  export const type = new RequestType<Params | undefined, Result, void>(method);
  /** The `$/progress` values for `workDoneToken`. */
  export const progress = new ProgressType<FlushProgress>();
}

export namespace SetSchedulePaused {
  // client → agent: pause or resume the schedule, for one fetcher or (without `fetcher`) globally.
  export const method = 'quantilica/schedule/setPaused' as const;
  export interface Params { paused: boolean; fetcher?: string }
  export interface Result { schedule: ScheduleStatus }
  export const type = new RequestType<Params, Result, void>(method);
}

export namespace Changed {
  // agent → client notification: one state change, in version order.
  export const method = 'quantilica/changed' as const;
  export type Params = ChangedParams;
  export const type = new NotificationType<Params>(method);
}

/** One answer of `quantilica/readLog`: the bytes of a run's log from `offset` on. */
export interface LogChunk {
  runId: string;
  fetcher: string;
  /** Where `text` starts in the log file (bytes), and where the next read resumes. */
  offset: number;
  nextOffset: number;
  text: string;
  /** The run has ended and every byte of its log up to `nextOffset` was sent: stop following. */
  ended: boolean;
  status: RunStatus;
}

export namespace ReadLog {
  // client → agent: a run's log from a byte offset, for following it (long poll). When nothing new is
  // there yet the agent holds the answer until bytes arrive, the run ends or `waitMs` passes; answers
  // carry at most `maxBytes` (≤ 64 KiB), so a follower gets a bounded stream it can resume from
  // `nextOffset` after a reconnect.
  export const method = 'quantilica/readLog' as const;
  export interface Params { runId: string; offset: number; maxBytes?: number; waitMs?: number }
  export type Result = LogChunk;
  export const type = new RequestType<Params, Result, void>(method);
}

/** One sample of free disk space kept for the Station panel. */
export interface DiskSample { at: string; freeGb: number | null; state: DiskGateState }

/** A run as a bar on the Station timeline: which slot it held, from when to when, how it ended. */
export interface RunSpan {
  runId: string;
  fetcher: string;
  pool: string;
  slot: number | null;
  start: string;
  /** Null while it runs. */
  end: string | null;
  status: RunStatus;
  exitCode: number | null;
  reason: string | null;
}

export interface StationHistory {
  from: string;
  to: string;
  disk: DiskSample[];
  thresholds: { warnGb: number; pauseGb: number; resumeGb: number } | null;
  /** Every pool with its size: one lane per slot, also for slots that had no run. */
  pools: Array<{ name: string; size: number }>;
  runs: RunSpan[];
}

export namespace GetHistory {
  // client → agent: the last `hours` (default 24, at most 48) of disk samples and run spans.
  export const method = 'quantilica/history' as const;
  export interface Params { hours?: number }
  export type Result = StationHistory;
  /** Params may be left out: the last 24 hours. */
  export const type = new RequestType<Params | undefined, Result, void>(method);
}

/** An operator event as `quantilica/events` lists it: with its place in the agent's ring of recent events. */
export interface NumberedOperatorEvent extends OperatorEvent {
  seq: number;
}

export namespace ListEvents {
  // client → agent: the operator events after `after` (a `seq`; absent: the most recent `limit`), oldest
  // first. With `waitMs` and nothing newer yet, the agent holds the answer until an event arrives or
  // `waitMs` passes (long poll: `quantilica events --follow` resumes from `next`).
  export const method = 'quantilica/events' as const;
  export interface Params { after?: number; limit?: number; waitMs?: number }
  /** `next`: the `after` of the next call. */
  export interface Result { events: NumberedOperatorEvent[]; next: number }
  /** Params may be left out: the most recent events, no wait. */
  export const type = new RequestType<Params | undefined, Result, void>(method);
}

export namespace GetMetrics {
  // client → agent: the Prometheus text the metrics listener serves (`quantilica metrics`).
  export const method = 'quantilica/metrics' as const;
  export interface Result { contentType: string; text: string }
  export const type = new RequestType0<Result, void>(method);
}

/** Every request the agent answers, by method: the server's dispatch table and schemas are keyed by it. */
export const requestTypes = {
  [Initialize.method]: Initialize.type,
  [Shutdown.method]: Shutdown.type,
  [Hello.method]: Hello.type,
  [GetSnapshot.method]: GetSnapshot.type,
  [RunFetcher.method]: RunFetcher.type,
  [WaitRun.method]: WaitRun.type,
  [CancelRun.method]: CancelRun.type,
  [ListRuns.method]: ListRuns.type,
  [TailLog.method]: TailLog.type,
  [FlushTelemetry.method]: FlushTelemetry.type,
  [SetSchedulePaused.method]: SetSchedulePaused.type,
  [GetHistory.method]: GetHistory.type,
  [ReadLog.method]: ReadLog.type,
  [ListEvents.method]: ListEvents.type,
  [GetMetrics.method]: GetMetrics.type,
} as const;

export type RequestMethod = keyof typeof requestTypes;
/** What a request's params may be on the wire (undefined: none sent). */
export type ParamsOf<M extends RequestMethod> = (typeof requestTypes)[M] extends RequestType<infer P, unknown, unknown> ? P : undefined;
export type ResultOf<M extends RequestMethod> =
  (typeof requestTypes)[M] extends RequestType<infer _P, infer R, unknown> ? R : (typeof requestTypes)[M] extends RequestType0<infer R, unknown> ? R : never;
