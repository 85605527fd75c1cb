// The data the protocol carries: runs, pools, the snapshot and its changes, the error codes. The
// messages that carry them are in messages.ts.
//
// State travels as a versioned snapshot plus ordered change events: every change bumps
// `Snapshot.version` by exactly one and is pushed as a `quantilica/changed` notification carrying that version, so a
// client applies version N+1 on top of N and asks for a new snapshot on any gap.

export const PROTOCOL_VERSION = 1;

export type PoolName = 'heavy-io' | 'cpu-analysis' | 'network-light';
export const POOL_NAMES: readonly PoolName[] = ['heavy-io', 'cpu-analysis', 'network-light'];

/** Pool name used for every fetcher in serial compatibility mode (CRON_USE_POOLS=false). */
export const SERIAL_POOL = 'serial';

/**
 * A catalog fetcher's name, which is also what a client names in a request. Names are file and
 * lock-record components: no path characters, no shell metacharacters.
 */
export const FETCHER_NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;

/** Every status a run can be in; the type is read from the list so the two cannot drift apart. */
export const RUN_STATUSES = ['waiting', 'running', 'completed', 'failed', 'cancelled', 'skipped'] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];

/** The statuses a run ends in: no move leaves them. */
export const FINAL_STATES: readonly RunStatus[] = ['completed', 'failed', 'cancelled', 'skipped'];
const FINAL = new Set<RunStatus>(FINAL_STATES);

/** Whether a run in this status has ended; the others (`waiting`, `running`) are live. */
export function isFinalStatus(status: RunStatus): boolean {
  return FINAL.has(status);
}
export type RunTrigger = 'cli' | 'protocol' | 'schedule' | 'catch-up' | 'adopted';

/**
 * Why a run is in its state: why it failed, was cancelled or skipped, or what a live run is doing
 * (`starting`: its spawn is recorded but not yet confirmed; `lingering`: its wrapper ended but
 * processes of the run still hold the slot; `hibernating`: a GitHub sync waiting for its rate limit).
 * Always one of these tokens, never prose: clients switch on them.
 */
export const RUN_REASONS = [
  'wait-timeout',
  'disk-backpressure-timeout',
  'admission-impossible',
  'no-such-pool',
  'lock-file-unsafe',
  'lock-dir-unsafe',
  'lock-group-unknown',
  'slot-error',
  'start-error',
  'exit-code',
  'signal',
  'exit-status-unknown',
  'memory-limit',
  'cancelled',
  'agent-stopping',
  'owner-exited-while-waiting',
  'already-active',
  'starting',
  'lingering',
  'hibernating',
  // A GitHub sync's ends: completed with repositories not reached, or failed with its sync's reason.
  'repos-not-reached',
  'repos-file-invalid',
  'github-sync-unavailable',
  'storage-error',
  'stuck-no-progress',
  'unknown-sync',
  'no-repositories',
  'sync-completed',
  'sync-failed',
  'sync-cancelled',
  // The postgres slot backend: its database cannot be reached; a run's slot session was lost.
  'slot-backend-unavailable',
  'slot-session-lost',
  // Run policies: a try failed and the next one waits its backoff; the run passed its deadline; its log
  // stopped growing for its stall limit (and the policy cancels it).
  'retry-backoff',
  'timeout',
  'stalled',
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
  | { kind: 'slot-backend'; cause: 'unreachable' | 'connection-cap' }
  /**
   * A GitHub sync whose storage went away mid-sync (its database restarting or down, its disk full): it
   * holds no slot and resumes from its checkpoints once a probe finds the storage back.
   */
  | { kind: 'storage'; cause: 'unreachable' | 'disk-full'; since: string };

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
  'failed',
  'retrying',
  'timeout',
  'stalled',
  'late',
  'recovered',
  'disk-paused',
  'disk-resumed',
  'sync-hibernated',
  'sync-not-reached',
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
/** The budgets (GitHub's rate-limit resources) a sync reserves its requests on. */
export const GITHUB_BUDGETS: readonly GithubBudget[] = ['core', 'graphql'];

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
  counters: {
    records_collected: number;
    records_created: number;
    requests_made: number;
    requests_saved: number;
    hibernations: number;
    requests_core?: number;
    requests_graphql?: number;
  };
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

/** One sample of free disk space kept for the Station panel. */
export interface DiskSample {
  at: string;
  freeGb: number | null;
  state: DiskGateState;
}

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

/** An operator event as `quantilica/events` lists it: with its place in the agent's ring of recent events. */
export interface NumberedOperatorEvent extends OperatorEvent {
  seq: number;
}
