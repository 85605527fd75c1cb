import * as fs from 'node:fs';
import * as path from 'node:path';
import type { RunInfo, RunReason, RunStatus, RunTrigger, WaitReason } from '../../shared/protocol';
import { isGithubSync, type CatalogEntry } from '../catalog/catalog';
import type { Config } from '../config/config';
import { InvalidArgumentError, UnknownRunError } from '../errors';
import { fetcherUmask } from '../config/umask';
import type { Logger } from '../log/logger';
import type { FinalUsage, RunMemory } from '../memory/runMemory';
import { oomWarning } from '../memory/oomWarning';
import { fetcherEnv } from './fetcherEnv';
import { tailFd, tailFile } from './logCap';
import { createRunLog, logDirSetting, openRunLog } from './runLogFile';
import { CancelledError, groupOf, newActiveRun, ParkedError, sleepUntil, type ActiveRun } from './activeRun';
import { appendAgentLines, neverStartedLines, runLogPath } from './agentRunLog';
import { newRunId } from './newRunId';
import type { ExitInfo } from './runProcess';
import type { Clock, HeldSlot, RunJournal, RunSpawner, SlotSource } from './runPorts';
import { toRunInfo, type StoredRun } from './runStore';
import { enter, FINAL_STATES, named, transition, type MoveDetail, type NamedMove, type RunFields, type TransitionPorts } from './runTransitions';
import { isRetryable, retryDelayMs, runPolicy, type RunPolicy } from './runPolicy';
import type { InAgentWork, RunMoves } from './runMoves';
import { RunUpkeep } from './runUpkeep';
import { RunRefusedError } from '../errors';
import type { GateRequest, StartGate } from './startGate';
import { validateArgs } from './validateArgs';

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
  /** Runs the GitHub sync entries (`kind: github-sync`) inside the agent; without it they are refused. */
  github?: InAgentWork;
}

/** How often the positions of queued runs are published while the queue moves (see setWait). */
const POSITION_PUBLISH_GAP_MS = 1_000;

/**
 * A run's life: waiting (disk gate, then a pool slot, in that order) → running (a wrapper process
 * holding the slot's lock) → completed, failed or cancelled. Every change goes through `transition`
 * (runTransitions.ts): state and telemetry in one durable commit, then published. A run's position
 * in its pool's queue is the one exception: it is progress within `waiting`, not a move (setWait).
 */
export class RunManager {
  private readonly active = new Map<string, ActiveRun>();
  /** Queued runs whose position changed since the last publication of positions (setWait). */
  private readonly shifted = new Set<ActiveRun>();
  private shiftTimer: NodeJS.Timeout | null = null;
  /**
   * The agent's environment, copied once: spreading `process.env` (an accessor over the C environment)
   * for every run was the costliest part of building a fetcher's environment on the hot path.
   */
  private readonly baseEnv: NodeJS.ProcessEnv = { ...process.env };
  private readonly finishWaiters = new Map<string, Array<(run: RunInfo) => void>>();
  private readonly upkeep: RunUpkeep;
  private readonly ports: TransitionPorts;
  /** Held while someone awaits a run's end: the fetcher and the timers are unref'd, the answer is not. */
  private waitKeepAlive: NodeJS.Timeout | null = null;
  private intake = true;
  private closed = false;

  constructor(private readonly deps: RunManagerDeps) {
    fs.mkdirSync(this.statusDir(), { recursive: true, mode: 0o700 });
    this.ports = { journal: deps.journal, clock: deps.clock, publish: (run) => deps.onRunChange(run) };
    this.upkeep = new RunUpkeep({
      spawner: deps.spawner,
      logger: deps.logger,
      heartbeatSeconds: deps.config.heartbeatSeconds,
      graceSeconds: deps.config.cancelGraceSeconds,
      logCapBytes: deps.config.logCapBytes,
      wrapperPath: deps.wrapperPath,
      memory: deps.memory, // memory ceilings
      publish: (state) => deps.onRunChange(toRunInfo(state.run)),
      record: (event) => { if (!this.closed) void deps.journal.record(event); },
      onLingering: (state, pids) => this.onLingering(state, pids),
      onEnded: (state, exit) => this.onExit(state, exit),
      onDeadline: (state) => this.onDeadline(state),
      onStall: (state, stalled) => this.onStall(state, stalled),
    });
  }

  /** Queues a run; resolves once its `waiting` state is durable. */
  async enqueue(fetcher: string, args: string[], trigger: RunTrigger): Promise<RunInfo> {
    if (!this.intake) throw new InvalidArgumentError('the agent is stopping and takes no new runs');
    const entry = this.deps.catalog.resolve(fetcher);
    validateArgs(args, entry);
    const run = this.newRun(entry, 'waiting', trigger, args, null);
    const state = newActiveRun(run, entry, this.policyOf(entry, run.pool));
    this.active.set(run.runId, state);
    const recorded = enter(this.ports, run);
    // The wait starts at once: a free slot's `starting` intent joins the same group commit.
    state.driving = this.drive(state, recorded);
    await recorded;
    return toRunInfo(run);
  }

  /** Records a run that was due but not started (the schedule's "already running"). */
  async recordSkipped(fetcher: string, reason: RunReason, trigger: RunTrigger, detail: MoveDetail = {}): Promise<RunInfo> {
    const run = this.newRun(this.deps.catalog.resolve(fetcher), 'skipped', trigger, [], reason);
    run.finishedAt = run.enqueuedAt;
    await enter(this.ports, run, detail);
    return toRunInfo(run);
  }

  get(runId: string): RunInfo | null {
    const state = this.active.get(runId);
    if (state) return toRunInfo(state.run);
    const stored = this.deps.journal.get(runId);
    return stored ? toRunInfo(stored) : null;
  }

  activeRuns(): RunInfo[] {
    return [...this.active.values()].map((s) => toRunInfo(s.run));
  }

  activeRunOf(fetcher: string): RunInfo | null {
    for (const s of this.active.values()) if (s.run.fetcher === fetcher) return toRunInfo(s.run);
    return null;
  }

  isOwnRun(runId: string): boolean {
    return this.active.has(runId);
  }

  /** Run ids this process manages (for retention: their files stay). */
  activeIds(): string[] {
    return [...this.active.keys()];
  }

  /** The end of a run's log: through the descriptor the agent holds while it runs, else opened safely. */
  tailLog(runId: string, maxBytes: number): { text: string; truncated: boolean } {
    const state = this.active.get(runId);
    const fd = state ? this.upkeep.logFdOf(state) : null;
    if (fd !== null) return tailFd(fd, maxBytes);
    const run = this.get(runId);
    if (!run?.logPath) throw new InvalidArgumentError(`run ${runId} has no log yet`);
    return tailFile(run.logPath, maxBytes);
  }

  /** Resolves with the run once its end is durable. */
  waitRun(runId: string): Promise<RunInfo> {
    const known = this.get(runId);
    if (!known) return Promise.reject(new UnknownRunError(runId));
    if (FINAL_STATES.includes(known.status) && !this.active.has(runId)) return Promise.resolve(known);
    this.waitKeepAlive ??= setInterval(() => {}, 1 << 30);
    return new Promise((resolve) => {
      const list = this.finishWaiters.get(runId) ?? [];
      list.push(resolve);
      this.finishWaiters.set(runId, list);
    });
  }

  /**
   * Cancels a run: a waiting run leaves its queue (also between its slot grant and its spawn); a
   * running one gets SIGTERM on its whole process group, then SIGKILL after the grace period. Returns
   * at once; `waitRun` tells when it has ended (only after no process of the group is left).
   */
  cancel(runId: string, fromStation?: string): RunInfo {
    const state = this.active.get(runId);
    if (!state) {
      if (this.deps.journal.get(runId)) throw new InvalidArgumentError(`run ${runId} is not active; nothing to cancel`);
      throw new UnknownRunError(runId);
    }
    if (state.cancelRequested || state.ending) return toRunInfo(state.run);
    state.cancelRequested = true;
    void this.deps.journal.record({ runId, event: 'cancel-requested', task: state.run.fetcher, pool: state.run.pool, payload: fromStation !== undefined ? { fromStation } : {} });
    // In-agent work (a GitHub sync) has no process: its abort stops it, working or hibernating.
    if (state.run.status === 'waiting' || isGithubSync(state.entry)) state.abort.abort(new CancelledError('cancelled', 'cancelled'));
    else if (state.run.pid) this.upkeep.terminate(state);
    return toRunInfo(state.run);
  }

  /**
   * Cancels a waiting run an agent left while no agent runs (a CLI working in-process): it ends
   * `cancelled` here, never started. Null when the run is not such a run.
   */
  async cancelKept(runId: string): Promise<RunInfo | null> {
    const stored = this.deps.journal.get(runId);
    if (!stored || !isKeptInQueue(stored) || this.active.has(runId) || this.deps.spawner.ownerAlive(stored)) return null;
    const entry = this.entryOf(stored);
    const state = newActiveRun({ ...stored }, entry, this.policyOf(entry, stored.pool));
    this.active.set(runId, state);
    void this.deps.journal.record({ runId, event: 'cancel-requested', task: stored.fetcher, pool: stored.pool, payload: {} });
    await this.finish(state, 'cancelled', 'cancelled', { exitCode: stored.exitCode, signal: stored.signal });
    return toRunInfo(state.run);
  }

  /**
   * Stops taking new runs; running fetchers go on unless `stopFetchers`. An agent's waiting runs
   * (queued, at the disk gate, in a retry backoff) stay waiting, durably, for the next agent to resume
   * in their order: the queue is work someone asked for. With `cancelWaiting` (and always for a CLI's
   * own runs, which no later agent resumes) they end `cancelled` with reason `agent-stopping`.
   * A run between its slot grant and its spawn is either put back in the queue or started and left running.
   */
  async shutdown(stopFetchers: boolean, cancelWaiting = false): Promise<void> {
    this.intake = false;
    const drives: Array<Promise<void>> = [];
    for (const state of this.active.values()) {
      // An agent's run stays in the agent's queue, also while a CLI took it over (a retry of a run it adopted).
      const keep = !cancelWaiting && state.run.ownerRole === 'agent';
      // A hibernating sync stays as it is: the next agent wakes it at its time (it holds nothing now).
      if (state.run.status === 'waiting' && state.run.reason === 'hibernating') continue;
      if (state.run.status === 'waiting' || isGithubSync(state.entry)) {
        // A sync working inside the agent cannot outlive it: it ends `cancelled` (agent-stopping).
        state.abort.abort(keep && state.run.status === 'waiting' ? new ParkedError() : new CancelledError('agent-stopping', 'the agent stopped while the run waited'));
        if (state.driving) drives.push(state.driving);
      } else if (stopFetchers) this.cancel(state.run.runId);
    }
    await Promise.all(drives);
    if (stopFetchers) await Promise.all([...this.active.values()].filter((s) => s.run.status === 'running').map((s) => this.waitRun(s.run.runId)));
    this.upkeep.close();
    if (this.shiftTimer) clearTimeout(this.shiftTimer);
    this.shiftTimer = null;
    this.shifted.clear();
    if (this.waitKeepAlive) clearInterval(this.waitKeepAlive);
    // From here on the runs belong to whoever adopts them next; this process records nothing more.
    this.closed = true;
    for (const state of this.active.values()) this.upkeep.stop(state);
  }

  /**
   * At start: runs left by a process that is gone. A run that was `running` is adopted if its group
   * still lives, or finished from the wrapper's status file; a run recorded as `starting` (the spawn
   * was recorded, its pid was not) is found by its id in /proc or by its status file; a run that had
   * not reached its spawn fails with `owner-exited-while-waiting`.
   */
  async adoptLeftovers(): Promise<void> {
    const moves: Array<Promise<void>> = [];
    for (const stored of this.deps.journal.active()) {
      if (this.active.has(stored.runId) || this.deps.spawner.ownerAlive(stored)) continue;
      if (isKeptInQueue(stored)) {
        // Waiting runs an agent left are the next agent's, in their order: a CLI leaves them be.
        if (this.deps.self.role === 'agent') this.resumeWaiting(stored);
        continue;
      }
      moves.push(this.adopt(stored));
    }
    await Promise.all(moves);
  }

  private entryOf(stored: StoredRun): CatalogEntry {
    try {
      return this.deps.catalog.resolve(stored.fetcher);
    } catch {
      return { name: stored.fetcher, pool: stored.pool, argv: ['?'], demo: false };
    }
  }

  private policyOf(entry: CatalogEntry, pool: string): RunPolicy {
    return runPolicy(entry, this.deps.runTimeoutOf?.(pool) ?? 0);
  }

  private async adopt(stored: StoredRun): Promise<void> {
    const entry = this.entryOf(stored);
    const state = newActiveRun({ ...stored }, entry, this.policyOf(entry, stored.pool));
    const { run } = state;
    const own = { ownerPid: this.deps.self.pid, ownerStartTime: this.deps.self.startTime, ...(this.deps.self.role === 'agent' ? { ownerRole: 'agent' as const } : {}) };
    if (isGithubSync(entry) && (run.status === 'running' || run.reason === 'hibernating')) {
      // A sync left by a dead agent: its next leg (now, or at its wake-up time) is this agent's.
      if (!this.deps.github?.adopts) return;
      this.active.set(run.runId, state);
      await this.move(state, run.status, { ...own, slot: null });
      this.deps.github.adopt(state, this.moves);
      return;
    }
    this.active.set(run.runId, state);
    if (run.status === 'waiting') {
      const group = run.reason === 'starting' ? this.deps.spawner.findGroup(run.runId) : null;
      const recorded = run.reason === 'starting' && run.statusFile ? this.deps.spawner.readStatus(run.statusFile) : null;
      if (group === null && (recorded === null || recorded.unknown)) {
        await this.finish(state, 'failed', 'owner-exited-while-waiting', { exitCode: null, signal: null });
        return;
      }
      // The spawn happened before the agent died: the run did start.
      await this.move(state, 'running', { ...own, reason: null, wait: null, pid: group?.pgid ?? null, startTime: group?.startTime ?? null, startedAt: run.startedAt ?? this.deps.clock.now().toISOString() });
    } else {
      await this.move(state, 'running', own);
    }
    this.deps.logger.info({ runId: run.runId, fetcher: run.fetcher, pid: run.pid }, 'adopted a run left by a previous agent');
    this.deps.memory?.track(run.runId, run.pool, groupOf(run)); // memory ceilings
    this.upkeep.follow(state, null, this.adoptedLog(run));
  }

  /** The log of an adopted run, opened once and checked (never through a link); null: not capped. */
  private adoptedLog(run: StoredRun): number | null {
    if (!run.logPath) return null;
    try {
      return openRunLog(run.logPath, true);
    } catch (err) {
      this.deps.logger.warn({ runId: run.runId, logPath: run.logPath, err: (err as Error).message }, 'the log of an adopted run is not capped');
      return null;
    }
  }

  /**
   * A run an agent left waiting (queued, at the disk gate, in its retry backoff): taken over as it was,
   * with its enqueue time, trigger and attempt, and queued again now (the caller goes in the store's
   * order, so the queue keeps its order). A wait whose limit passed while no agent ran ends it.
   */
  private resumeWaiting(stored: StoredRun): void {
    const entry = this.entryOf(stored);
    const state = newActiveRun({ ...stored }, entry, this.policyOf(entry, stored.pool));
    const { run } = state;
    this.active.set(run.runId, state);
    const own = { ownerPid: this.deps.self.pid, ownerStartTime: this.deps.self.startTime, ownerRole: 'agent' as const };
    this.deps.logger.info({ runId: run.runId, fetcher: run.fetcher, wait: run.wait }, 'resumed a run a previous agent left waiting');
    if (run.reason === 'retry-backoff') {
      const recorded = this.named(state, 'resume', own);
      state.driving = recorded.then(() => this.backoff(state));
      return;
    }
    const limit = this.waitLimit(run);
    if (limit !== null && limit.leftMs <= 0) {
      state.driving = this.finish(state, 'failed', limit.reason, { exitCode: null, signal: null }, `the run's wait limit (${limit.seconds} s) passed while no agent ran`);
      return;
    }
    state.driving = this.drive(state, this.named(state, 'resume', own), limit ?? undefined);
  }

  /** What is left of a waiting run's present wait, by the limit of the kind of wait it is in. */
  private waitLimit(run: StoredRun): StageLimit | null {
    const since = run.waitSince ? Date.parse(run.waitSince) : NaN;
    if (!Number.isFinite(since) || run.wait === null) return null;
    const elapsed = this.deps.clock.now().getTime() - since;
    if (run.wait.kind === 'pool') {
      const seconds = this.deps.pools.get(run.pool)?.waitTimeoutSeconds;
      return seconds === undefined ? null : { stage: 'pool', seconds, leftMs: seconds * 1000 - elapsed, reason: 'wait-timeout' };
    }
    if (run.wait.kind === 'disk' || run.wait.kind === 'admission') {
      const seconds = this.deps.diskMaxWaitSeconds;
      return seconds === undefined ? null : { stage: 'gate', seconds, leftMs: seconds * 1000 - elapsed, reason: 'disk-backpressure-timeout' };
    }
    return null;
  }

  /** The backoff before a run's next try; then the try queues like a new run (the disk gate, a slot). */
  private async backoff(state: ActiveRun): Promise<void> {
    const { wait } = state.run;
    if (wait?.kind !== 'retry') return;
    try {
      await sleepUntil(Date.parse(wait.until), state.abort.signal);
    } catch (err) {
      if (err instanceof ParkedError) return;
      await this.finish(state, 'cancelled', err instanceof CancelledError ? err.reason : 'cancelled', { exitCode: state.run.exitCode, signal: state.run.signal });
      return;
    }
    const recorded = this.named(state, 'retryWake', { reason: null, wait: null, attempt: wait.attempt, waitSince: this.deps.clock.now().toISOString() });
    await this.drive(state, recorded);
  }

  private async drive(state: ActiveRun, recorded: Promise<void>, resumed?: StageLimit): Promise<void> {
    const { run, entry } = state;
    const request: GateRequest = { runId: run.runId, fetcher: run.fetcher, expectedBytes: !isGithubSync(entry) && entry.expectedSizeMb !== undefined ? entry.expectedSizeMb * 1024 * 1024 : null };
    const pool = this.deps.pools.get(run.pool);
    let grant: HeldSlot | null = null;
    try {
      if (!pool) throw new RunRefusedError('no-such-pool', `pool ${run.pool} is not configured`);
      await withStageLimit(state.abort.signal, resumed?.stage === 'gate' ? resumed : undefined, (signal) => this.deps.gate.waitToStart(request, signal, (reason) => this.setWait(state, reason)));
      grant = await withStageLimit(state.abort.signal, resumed?.stage === 'pool' ? resumed : undefined, (signal) => pool.acquire(run.runId, signal, (position) => this.setWait(state, { kind: 'pool', position }), (cause) => this.setWait(state, { kind: 'slot-backend', cause })));
      this.throwIfCancelled(state);
      if (isGithubSync(entry)) {
        await recorded;
        if (!this.deps.github) throw new RunRefusedError('github-sync-unavailable', 'GitHub syncs run only in the agent');
        // The agent keeps the slot's descriptor itself while the sync works (githubRuns.ts).
        this.deps.github.begin(state, grant, this.moves);
        this.deps.gate.runStarted(request);
        return;
      }
      // The intent first, durably: an agent that dies after the spawn leaves a run the next one finds
      // by its id (the spawn's environment) or its status file, never a `waiting` run that ran.
      // Commits keep their order, so this one also waits for the enqueue's; with a free slot both go
      // in one transaction (one fsync before the spawn, not two).
      // Each try has its own status file: a later agent must never read an earlier try's exit.
      const attempt = run.attempt ?? 1;
      const statusFile = path.join(this.statusDir(), attempt === 1 ? `${run.runId}.exit` : `${run.runId}.${attempt}.exit`);
      const logPath = runLogPath(this.deps.config.logDir, run.fetcher, run.runId);
      await this.move(state, 'waiting', { reason: 'starting', wait: null, slot: grant.index, statusFile, logPath });
      this.throwIfCancelled(state);
      await this.start(state, grant);
    } catch (err) {
      if (grant !== null && state.run.pid === null) {
        // Cancelled (or refused) after the grant, before the spawn: the slot goes straight back.
        grant.lock.closeOwnCopy();
        pool?.released();
      }
      if (state.run.status === 'running') {
        // The fetcher runs; only its owner record could not be written. It is still watched and finished.
        this.deps.logger.error({ err, runId: run.runId }, 'could not write the slot owner record');
        return;
      }
      // The slot, if any, is already given back: the run's end must not release it twice.
      state.run.slot = state.run.pid === null ? null : state.run.slot;
      if (err instanceof ParkedError) {
        // Kept for the next agent; a run that had its slot already goes back to the queue's head.
        if (state.run.reason === 'starting') await this.named(state, 'park', { reason: null, slot: null, statusFile: null, wait: { kind: 'pool', position: 1 } });
        return;
      }
      if (err instanceof CancelledError) await this.finish(state, 'cancelled', err.reason, { exitCode: null, signal: null });
      else if (err instanceof RunRefusedError) await this.finish(state, 'failed', err.reason, { exitCode: null, signal: null }, err.message);
      else await this.finish(state, 'failed', 'start-error', { exitCode: null, signal: null }, (err as Error).message);
      return;
    }
    this.deps.gate.runStarted(request);
    // Published again now that the lock file names this run (the status change came before the record).
    this.deps.onPoolChange(run.pool);
  }

  private throwIfCancelled(state: ActiveRun): void {
    if (!state.abort.signal.aborted && !state.cancelRequested) return;
    const reason: unknown = state.abort.signal.reason;
    throw reason instanceof CancelledError || reason instanceof ParkedError ? reason : new CancelledError('cancelled', 'cancelled while waiting');
  }

  /** The moves of in-agent work (runMoves.ts): each goes through `transition` like a fetcher's. */
  private readonly moves: RunMoves = {
    // In-agent work (a GitHub sync) writes its progress into the run's own log.
    running: (state, slot, detail, workLeftMs = null) => this.move(state, 'running', { startedAt: state.run.startedAt ?? this.deps.clock.now().toISOString(), slot, pid: null, reason: null, wait: null, logPath: state.run.logPath ?? runLogPath(this.deps.config.logDir, state.run.fetcher, state.run.runId),
      deadline: workLeftMs === null ? null : new Date(this.deps.clock.now().getTime() + workLeftMs).toISOString(), workLeftMs }, detail),
    hibernating: (state, until, detail, workLeftMs = null) => this.move(state, 'waiting', { slot: null, reason: 'hibernating', wait: { kind: 'hibernating', until: until.toISOString() }, deadline: null, workLeftMs }, detail),
    setWait: (state, wait) => this.setWait(state, wait),
    heartbeat: (state, payload) => { if (!this.closed) void this.deps.journal.record({ runId: state.run.runId, event: 'heartbeat', task: state.run.fetcher, pool: state.run.pool, payload }); },
    // The work has released its slot already: the end must not release it again.
    finish: (state, status, reason, exitCode, message) => { state.run.slot = null; return this.finish(state, status, reason, { exitCode, signal: null }, message); },
  };

  private async start(state: ActiveRun, grant: HeldSlot): Promise<void> {
    const { run, entry } = state;
    if (isGithubSync(entry)) throw new Error('a GitHub sync has no process to start');
    const { config } = this.deps;
    // A later try appends to the log its first try made (checked again on its descriptor, never through a
    // link); only a first try, or a log removed meanwhile, creates it.
    const logFd = ((run.attempt ?? 1) > 1 ? openRunLog(run.logPath!, true) : null)
      ?? createRunLog(config.logDir, path.basename(run.logPath!), logDirSetting(config.logDir, config.dataDir));
    const argv = [...entry.argv, ...run.args];
    let proc;
    try {
      proc = await this.deps.spawner.spawn({
        wrapperPath: this.deps.wrapperPath,
        statusFile: run.statusFile!,
        argv,
        cwd: entry.cwd ?? config.dataDir,
        env: fetcherEnv({ base: this.baseEnv, entryEnv: entry.env, passEnv: entry.passEnv, fetcherUmask: fetcherUmask(), run: { DATA_DIR: config.dataDir, QUANTILICA_RUN_ID: run.runId, QUANTILICA_FETCHER: run.fetcher, QUANTILICA_POOL: run.pool, QUANTILICA_SLOT: String(grant.index),
          ...this.deps.memory?.prepare(run.runId, run.pool, entry.memoryMb), // memory ceilings: the run's cgroup, before the spawn
        } }),
        logFd,
        lockFd: grant.lock.fd,
      });
    } catch (err) {
      fs.closeSync(logFd);
      throw err;
    }
    // The process exists from here on: it is recorded, watched and, if a cancel came meanwhile, stopped.
    run.pid = proc.pid;
    try {
      grant.lock.writeRecord({ pid: proc.pid, startTime: proc.startTime, fetcher: run.fetcher, runId: run.runId, since: this.deps.clock.now().toISOString(), agentPid: this.deps.self.pid });
    } finally {
      grant.lock.closeOwnCopy();
    }
    const now = this.deps.clock.now();
    const { timeoutSeconds } = state.policy;
    // A later try keeps the run's first start: the run's duration is all of its tries.
    const running = this.move(state, 'running', {
      reason: null, startedAt: run.startedAt ?? now.toISOString(), pid: proc.pid, startTime: proc.startTime, exitCode: null, signal: null,
      deadline: timeoutSeconds === null ? null : new Date(now.getTime() + timeoutSeconds * 1000).toISOString(), logGrewAt: now.toISOString(), stalledSince: null,
    }, { argv, ...(timeoutSeconds === null ? {} : { timeoutSeconds }) });
    this.deps.memory?.track(run.runId, run.pool, groupOf(run)); // memory ceilings
    this.upkeep.follow(state, proc.exited, logFd);
    if (state.cancelRequested) this.upkeep.terminate(state);
    await running;
  }

  /**
   * The wrapper has ended but processes of the run live on and hold its slot (`sleep 300 & exit 0`,
   * or the wrapper was killed): the run stays `running`, with reason `lingering`, until they are
   * gone, so the slot is accounted for and `cancel` can still reach them (README, "How a run works").
   */
  private onLingering(state: ActiveRun, pids: number[]): void {
    if (this.closed || state.ending) return;
    // A run being stopped for its deadline or a stall keeps that reason: it is how it will end.
    if (state.run.reason === 'timeout' || state.run.reason === 'stalled') return;
    void this.move(state, 'running', { reason: 'lingering' }, { lingering: pids });
    this.deps.logger.warn({ runId: state.run.runId, fetcher: state.run.fetcher, lingering: pids }, `the run's wrapper has ended but ${pids.length} of its processes still live and hold its slot; the run ends when they do (cancel stops them)`);
  }

  private onExit(state: ActiveRun, exit: ExitInfo): void {
    if (this.closed || state.ending) return;
    // A cancelled run's watch ended only once no process of the group was left.
    if (state.cancelRequested) {
      void this.finish(state, 'cancelled', 'cancelled', exit);
      return;
    }
    if (state.run.reason === 'timeout') {
      void this.finish(state, 'failed', 'timeout', exit, `the run passed its timeout (${state.policy.timeoutSeconds ?? '?'} s) and was stopped`);
      return;
    }
    if (state.run.reason === 'stalled') {
      void this.finish(state, 'cancelled', 'stalled', exit, `the run's log did not grow for ${state.policy.stallSeconds ?? '?'} s; cancelled (onStall: cancel)`);
      return;
    }
    // memory ceilings: a run whose process the OOM killer took at its (or its pool's) ceiling failed
    // for that reason, told by the cgroup's counter, not guessed from a SIGKILL.
    const usage = this.deps.memory?.release(state.run.runId) ?? null;
    if (usage?.oomKilled && exit.exitCode !== 0) void this.finish(state, 'failed', 'memory-limit', exit, `the run reached its memory ceiling (${usage.memoryLimitMb ?? '?'} MB) and was killed`, usage);
    else if (exit.unknown) void this.finish(state, 'failed', 'exit-status-unknown', exit, 'the run ended while no agent watched it and left no exit status', usage);
    else void this.finish(state, exit.exitCode === 0 ? 'completed' : 'failed', exit.exitCode === 0 ? null : exit.signal ? 'signal' : 'exit-code', exit, undefined, usage);
  }

  /** The try passed its deadline: its group gets TERM now, KILL after the grace; it ends `failed` (timeout). */
  private onDeadline(state: ActiveRun): void {
    if (this.closed || state.ending || state.cancelRequested || state.run.status !== 'running') return;
    this.deps.logger.warn({ runId: state.run.runId, fetcher: state.run.fetcher, deadline: state.run.deadline }, `the run passed its timeout (${state.policy.timeoutSeconds ?? '?'} s); stopping it`);
    void this.named(state, 'deadline', { reason: 'timeout' });
    this.upkeep.terminate(state);
  }

  /** The stall watchdog: marks the run stalled (or no longer), and cancels it when its policy says so. */
  private onStall(state: ActiveRun, stalled: boolean): void {
    if (this.closed || state.ending || state.run.status !== 'running') return;
    if (!stalled) {
      void this.named(state, 'unstall', { stalledSince: null });
      return;
    }
    void this.named(state, 'stall', { stalledSince: this.deps.clock.now().toISOString() }, { stallSeconds: state.policy.stallSeconds });
    this.deps.logger.warn({ runId: state.run.runId, fetcher: state.run.fetcher, logGrewAt: state.run.logGrewAt }, `the run's log has not grown for ${state.policy.stallSeconds ?? '?'} s`);
    if (state.policy.onStall !== 'cancel' || state.cancelRequested || state.run.reason === 'timeout') return;
    void this.named(state, 'stallCancel', { reason: 'stalled' });
    this.upkeep.terminate(state);
  }

  /**
   * A try failed and its policy retries it: the slot is given back now, the run waits its backoff
   * (reason `retry-backoff`, the wake-up time recorded, so a next agent keeps it), then queues again.
   */
  private async retry(state: ActiveRun, reason: RunReason | null, exit: ExitInfo, message?: string, usage?: FinalUsage | null): Promise<void> {
    state.ending = true;
    const { run } = state;
    this.upkeep.stop(state);
    const final = usage === undefined ? this.deps.memory?.release(run.runId) ?? null : usage;
    const next = (run.attempt ?? 1) + 1;
    const until = new Date(this.deps.clock.now().getTime() + retryDelayMs(state.policy, next, this.deps.random ? () => this.deps.random!() : undefined)).toISOString();
    const hadSlot = run.slot !== null;
    // The move applies at once: from here a cancel finds the run waiting for its retry.
    const recorded = this.named(state, 'retryWait', {
      reason: 'retry-backoff', wait: { kind: 'retry', until, attempt: next }, exitCode: exit.exitCode, signal: exit.signal, slot: null, pid: null, startTime: null,
      statusFile: null, deadline: null, stalledSince: null, memoryMb: null, ...(final ? { peakMemoryMb: final.peakMemoryMb, cpuSeconds: final.cpuSeconds } : {}),
    }, { failedFor: reason, until, ...(message ? { message } : {}) });
    this.deps.gate.runEnded(run.runId);
    if (hadSlot) this.deps.pools.get(run.pool)?.released();
    state.ending = false;
    state.lingering = [];
    state.driving = this.backoff(state);
    await recorded;
    this.deps.logger.info({ runId: run.runId, fetcher: run.fetcher, attempt: next - 1, attempts: state.policy.attempts, exitCode: exit.exitCode, reason, until }, `try ${next - 1} of ${state.policy.attempts} failed; the next at ${until}`);
  }

  private async finish(state: ActiveRun, status: RunStatus, reason: RunReason | null, exit: ExitInfo, message?: string, usage?: FinalUsage | null): Promise<void> {
    if (this.closed || state.ending) return;
    if (status !== 'completed' && (state.run.attempt ?? 1) < state.policy.attempts && isRetryable(state.policy, { status, reason, exitCode: exit.exitCode })) {
      await this.retry(state, reason, exit, message, usage);
      return;
    }
    state.ending = true;
    const { run } = state;
    this.upkeep.stop(state);
    // memory ceilings: the run's peak memory and CPU, kept with it and sent with its finish.
    const final = usage === undefined ? this.deps.memory?.release(run.runId) ?? null : usage;
    // OOM kills inside the run are kept and sent also when the fetcher exited 0 (a child was killed
    // at the ceiling and the fetcher went on): a warning on the run, never hidden by its exit code.
    const figures = final ? { peakMemoryMb: final.peakMemoryMb, cpuSeconds: final.cpuSeconds, memorySource: final.memorySource, oomKills: final.oomKills } : {};
    const kept = final ? { ...figures, memoryMb: null, memoryLimitMb: final.memoryLimitMb } : {};
    // A run that ended while no agent watched it ended when its status file was written.
    const finishedAt = (exit.endedAt ?? this.deps.clock.now()).toISOString();
    const neverStarted = run.startedAt === null && run.logPath === null ? runLogPath(this.deps.config.logDir, run.fetcher, run.runId) : null;
    if (neverStarted !== null && !appendAgentLines(neverStarted, neverStartedLines(toRunInfo(run), status, reason, message))) this.deps.logger.warn({ runId: run.runId }, 'could not write why the run never started into its log');
    await this.move(state, status, { reason, exitCode: exit.exitCode, signal: exit.signal, finishedAt, wait: null, ...kept, ...(neverStarted !== null ? { logPath: neverStarted } : {}) }, { ...(message ? { message } : {}), ...figures });
    if (message) this.deps.logger.warn({ runId: run.runId, fetcher: run.fetcher, reason }, message);
    else if (final?.oomKills) this.deps.logger.warn({ runId: run.runId, fetcher: run.fetcher, oomKills: final.oomKills }, `${oomWarning(final.oomKills)} (run ${run.runId} ended ${status} ${exit.exitCode ?? ''})`);
    this.active.delete(run.runId);
    this.deps.gate.runEnded(run.runId);
    if (run.slot !== null) this.deps.pools.get(run.pool)?.released();
    const waiters = this.finishWaiters.get(run.runId) ?? [];
    this.finishWaiters.delete(run.runId);
    if (this.finishWaiters.size === 0 && this.waitKeepAlive) {
      clearInterval(this.waitKeepAlive);
      this.waitKeepAlive = null;
    }
    for (const resolve of waiters) resolve(toRunInfo(run));
  }

  private setWait(state: ActiveRun, reason: WaitReason): void {
    if (state.run.status !== 'waiting' || state.ending || state.run.reason === 'starting' || state.run.reason === 'retry-backoff') return;
    const before = state.run.wait;
    if (JSON.stringify(before) === JSON.stringify(reason)) return;
    if (before?.kind === 'pool' && reason.kind === 'pool') {
      // A shift in the pool's queue is progress within `waiting`, not a move: every grant shifts every
      // run behind it, and committing and publishing each shift made the agent's work per run grow
      // with the queue (1,000 queued runs: hundreds of commits and notifications per run started).
      // Kept in memory and shown at most once per POSITION_PUBLISH_GAP_MS; nothing of value is lost
      // in a crash (the next agent queues the run again and counts positions anew).
      state.run.wait = reason;
      this.shifted.add(state);
      this.shiftTimer ??= setTimeout(() => this.publishShifts(), POSITION_PUBLISH_GAP_MS).unref();
      return;
    }
    // A new kind of wait starts its own limit: a next agent counts what is left of it from here.
    void this.move(state, 'waiting', { wait: reason, ...(before?.kind !== reason.kind ? { waitSince: this.deps.clock.now().toISOString() } : {}) });
  }

  private publishShifts(): void {
    this.shiftTimer = null;
    for (const state of this.shifted) {
      if (state.run.status === 'waiting' && !state.ending && this.active.get(state.run.runId) === state) this.ports.publish(toRunInfo(state.run));
    }
    this.shifted.clear();
  }

  private move(state: ActiveRun, to: RunStatus, fields: RunFields, detail?: MoveDetail): Promise<void> {
    return transition(this.ports, state.run, to, fields, detail);
  }

  private named(state: ActiveRun, name: NamedMove, fields: RunFields, detail?: MoveDetail): Promise<void> {
    return named(this.ports, state.run, name, fields, detail);
  }

  private newRun(entry: CatalogEntry, status: RunStatus, trigger: RunTrigger, args: string[], reason: RunReason | null): StoredRun {
    const pool = this.deps.poolOf(entry);
    const now = this.deps.clock.now().toISOString();
    return {
      runId: newRunId(), fetcher: entry.name, pool, status, trigger, args,
      enqueuedAt: now, startedAt: null, finishedAt: null, slot: null, pid: null,
      exitCode: null, signal: null, reason, wait: null, logPath: null, startTime: null, statusFile: null,
      ownerPid: this.deps.self.pid, ownerStartTime: this.deps.self.startTime, ownerRole: this.deps.self.role ?? 'cli',
      attempt: 1, attempts: this.policyOf(entry, pool).attempts, waitSince: now,
    };
  }

  statusDir(): string {
    return path.join(this.deps.config.homeDir, 'runs');
  }
}

/** One stage of a resumed run's wait (the disk gate or the pool) and what is left of its limit. */
interface StageLimit {
  stage: 'gate' | 'pool';
  seconds: number;
  leftMs: number;
  reason: 'wait-timeout' | 'disk-backpressure-timeout';
}

/** A waiting run an agent left, which the next agent resumes (a run at its spawn is adopted instead). */
function isKeptInQueue(run: StoredRun): boolean {
  return run.status === 'waiting' && run.ownerRole === 'agent' && run.reason !== 'starting' && run.reason !== 'hibernating';
}

/** Runs a wait under the run's signal and, for a resumed wait, what is left of its limit. */
async function withStageLimit<T>(signal: AbortSignal, limit: StageLimit | undefined, wait: (signal: AbortSignal) => Promise<T>): Promise<T> {
  if (limit === undefined) return wait(signal);
  const bounded = new AbortController();
  const follow = () => bounded.abort(signal.reason);
  signal.addEventListener('abort', follow, { once: true });
  const timer = setTimeout(() => bounded.abort(new RunRefusedError(limit.reason, `the run's wait limit (${limit.seconds} s) passed`)), Math.max(0, limit.leftMs));
  try {
    return await wait(bounded.signal);
  } finally {
    clearTimeout(timer);
    signal.removeEventListener('abort', follow);
  }
}
