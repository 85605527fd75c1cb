import * as fs from 'node:fs';
import * as path from 'node:path';
import type { RunInfo, RunReason, RunStatus, RunTrigger, WaitReason } from '../../shared/protocol';
import { isGithubSync, type CatalogEntry } from '../catalog/catalog';
import type { Config } from '../config/config';
import { InvalidArgumentError, UnknownRunError } from '../errors';
import { fetcherUmask } from '../config/umask';
import type { Logger } from '../log/logger';
import type { FinalUsage, RunMemory } from '../memory/runMemory';
import { fetcherEnv } from './fetcherEnv';
import { CancelledError, groupOf, newActiveRun, type ActiveRun } from './activeRun';
import { appendAgentLines, neverStartedLines, runLogPath } from './agentRunLog';
import { newRunId } from './newRunId';
import type { ExitInfo } from './runProcess';
import type { Clock, HeldSlot, RunJournal, RunSpawner, SlotSource } from './runPorts';
import { toRunInfo, type StoredRun } from './runStore';
import { enter, FINAL_STATES, transition, type MoveDetail, type RunFields, type TransitionPorts } from './runTransitions';
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
  /** This process (agent or CLI), recorded as the owner of its runs. */
  self: { pid: number; startTime: number };
  /** memory ceilings (issue 12): each run's cgroup, or /proc sampling; absent: no figures at all. */
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
      memory: deps.memory, // memory ceilings (issue 12)
      publish: (state) => deps.onRunChange(toRunInfo(state.run)),
      record: (event) => { if (!this.closed) void deps.journal.record(event); },
      onLingering: (state, pids) => this.onLingering(state, pids),
      onEnded: (state, exit) => this.onExit(state, exit),
    });
  }

  /** Queues a run; resolves once its `waiting` state is durable. */
  async enqueue(fetcher: string, args: string[], trigger: RunTrigger): Promise<RunInfo> {
    if (!this.intake) throw new InvalidArgumentError('the agent is stopping and takes no new runs');
    const entry = this.deps.catalog.resolve(fetcher);
    validateArgs(args, entry);
    const run = this.newRun(entry, 'waiting', trigger, args, null);
    const state = newActiveRun(run, entry);
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
   * Stops taking new runs; running fetchers go on unless `stopFetchers`. Runs still waiting end
   * `cancelled` with reason `agent-stopping` (state, telemetry and waiting clients all learn it) before
   * the manager closes: a queued run belongs to whoever asked for it, and starting it later, when a
   * next agent happens to come up, could run a fetcher hours after its requester gave up on it.
   * A run between its slot grant and its spawn is either stopped there or started and left running.
   */
  async shutdown(stopFetchers: boolean): Promise<void> {
    this.intake = false;
    const drives: Array<Promise<void>> = [];
    for (const state of this.active.values()) {
      // A hibernating sync stays as it is: the next agent wakes it at its time (it holds nothing now).
      if (state.run.status === 'waiting' && state.run.reason === 'hibernating') continue;
      if (state.run.status === 'waiting' || isGithubSync(state.entry)) {
        // A sync working inside the agent cannot outlive it: it ends `cancelled` (agent-stopping).
        state.abort.abort(new CancelledError('agent-stopping', 'the agent stopped while the run waited'));
        if (state.driving) drives.push(state.driving);
      } else if (stopFetchers) this.cancel(state.run.runId);
    }
    await Promise.all(drives);
    if (stopFetchers) await Promise.all([...this.active.values()].filter((s) => s.run.reason !== 'hibernating').map((s) => this.waitRun(s.run.runId)));
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
      moves.push(this.adopt(stored));
    }
    await Promise.all(moves);
  }

  private async adopt(stored: StoredRun): Promise<void> {
    let entry: CatalogEntry;
    try {
      entry = this.deps.catalog.resolve(stored.fetcher);
    } catch {
      entry = { name: stored.fetcher, pool: stored.pool, argv: ['?'], demo: false };
    }
    const state = newActiveRun({ ...stored }, entry);
    const { run } = state;
    const own = { ownerPid: this.deps.self.pid, ownerStartTime: this.deps.self.startTime };
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
    this.deps.memory?.track(run.runId, run.pool, groupOf(run)); // memory ceilings (issue 12)
    this.upkeep.follow(state, null);
  }

  private async drive(state: ActiveRun, recorded: Promise<void>): Promise<void> {
    const { run, entry } = state;
    const request: GateRequest = { runId: run.runId, fetcher: run.fetcher, expectedBytes: !isGithubSync(entry) && entry.expectedSizeMb !== undefined ? entry.expectedSizeMb * 1024 * 1024 : null };
    const pool = this.deps.pools.get(run.pool);
    let grant: HeldSlot | null = null;
    try {
      if (!pool) throw new RunRefusedError('no-such-pool', `pool ${run.pool} is not configured`);
      await this.deps.gate.waitToStart(request, state.abort.signal, (reason) => this.setWait(state, reason));
      grant = await pool.acquire(run.runId, state.abort.signal, (position) => this.setWait(state, { kind: 'pool', position }));
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
      const statusFile = path.join(this.statusDir(), `${run.runId}.exit`);
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
    throw reason instanceof CancelledError ? reason : new CancelledError('cancelled', 'cancelled while waiting');
  }

  /** The moves of in-agent work (runMoves.ts): each goes through `transition` like a fetcher's. */
  private readonly moves: RunMoves = {
    // In-agent work (a GitHub sync) writes its progress into the run's own log.
    running: (state, slot, detail) => this.move(state, 'running', { startedAt: state.run.startedAt ?? this.deps.clock.now().toISOString(), slot, pid: null, reason: null, wait: null, logPath: state.run.logPath ?? runLogPath(this.deps.config.logDir, state.run.fetcher, state.run.runId) }, detail),
    hibernating: (state, until, detail) => this.move(state, 'waiting', { slot: null, reason: 'hibernating', wait: { kind: 'hibernating', until: until.toISOString() } }, detail),
    setWait: (state, wait) => this.setWait(state, wait),
    heartbeat: (state, payload) => { if (!this.closed) void this.deps.journal.record({ runId: state.run.runId, event: 'heartbeat', task: state.run.fetcher, pool: state.run.pool, payload }); },
    // The work has released its slot already: the end must not release it again.
    finish: (state, status, reason, exitCode, message) => { state.run.slot = null; return this.finish(state, status, reason, { exitCode, signal: null }, message); },
  };

  private async start(state: ActiveRun, grant: HeldSlot): Promise<void> {
    const { run, entry } = state;
    if (isGithubSync(entry)) throw new Error('a GitHub sync has no process to start');
    const { config } = this.deps;
    const logFd = openLog(run.logPath!, config.logDir);
    const argv = [...entry.argv, ...run.args];
    let proc;
    try {
      proc = await this.deps.spawner.spawn({
        wrapperPath: this.deps.wrapperPath,
        statusFile: run.statusFile!,
        argv,
        cwd: entry.cwd ?? config.dataDir,
        env: fetcherEnv({ base: this.baseEnv, entryEnv: entry.env, passEnv: entry.passEnv, fetcherUmask: fetcherUmask(), run: { DATA_DIR: config.dataDir, QUANTILICA_RUN_ID: run.runId, QUANTILICA_FETCHER: run.fetcher, QUANTILICA_POOL: run.pool, QUANTILICA_SLOT: String(grant.index),
          ...this.deps.memory?.prepare(run.runId, run.pool, entry.memoryMb), // memory ceilings (issue 12): the run's cgroup, before the spawn
        } }),
        logFd,
        lockFd: grant.lock.fd,
      });
    } finally {
      fs.closeSync(logFd);
    }
    // The process exists from here on: it is recorded, watched and, if a cancel came meanwhile, stopped.
    run.pid = proc.pid;
    try {
      grant.lock.writeRecord({ pid: proc.pid, startTime: proc.startTime, fetcher: run.fetcher, runId: run.runId, since: this.deps.clock.now().toISOString(), agentPid: this.deps.self.pid });
    } finally {
      grant.lock.closeOwnCopy();
    }
    const running = this.move(state, 'running', { reason: null, startedAt: this.deps.clock.now().toISOString(), pid: proc.pid, startTime: proc.startTime }, { argv });
    this.deps.memory?.track(run.runId, run.pool, groupOf(run)); // memory ceilings (issue 12)
    this.upkeep.follow(state, proc.exited);
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
    // memory ceilings (issue 12): a run whose process the OOM killer took at its (or its pool's) ceiling failed
    // for that reason, told by the cgroup's counter, not guessed from a SIGKILL.
    const usage = this.deps.memory?.release(state.run.runId) ?? null;
    if (usage?.oomKilled && exit.exitCode !== 0) void this.finish(state, 'failed', 'memory-limit', exit, `the run reached its memory ceiling (${usage.memoryLimitMb ?? '?'} MB) and was killed`, usage);
    else if (exit.unknown) void this.finish(state, 'failed', 'exit-status-unknown', exit, 'the run ended while no agent watched it and left no exit status', usage);
    else void this.finish(state, exit.exitCode === 0 ? 'completed' : 'failed', exit.exitCode === 0 ? null : exit.signal ? 'signal' : 'exit-code', exit, undefined, usage);
  }

  private async finish(state: ActiveRun, status: RunStatus, reason: RunReason | null, exit: ExitInfo, message?: string, usage?: FinalUsage | null): Promise<void> {
    if (this.closed || state.ending) return;
    state.ending = true;
    const { run } = state;
    this.upkeep.stop(state);
    // memory ceilings (issue 12): the run's peak memory and CPU, kept with it and sent with its finish.
    const final = usage === undefined ? this.deps.memory?.release(run.runId) ?? null : usage;
    const figures = final ? { peakMemoryMb: final.peakMemoryMb, cpuSeconds: final.cpuSeconds, memorySource: final.memorySource } : {};
    const kept = final ? { ...figures, memoryMb: null, memoryLimitMb: final.memoryLimitMb } : {};
    // A run that ended while no agent watched it ended when its status file was written.
    const finishedAt = (exit.endedAt ?? this.deps.clock.now()).toISOString();
    const neverStarted = run.startedAt === null && run.logPath === null ? runLogPath(this.deps.config.logDir, run.fetcher, run.runId) : null;
    if (neverStarted !== null && !appendAgentLines(neverStarted, neverStartedLines(toRunInfo(run), status, reason, message))) this.deps.logger.warn({ runId: run.runId }, 'could not write why the run never started into its log');
    await this.move(state, status, { reason, exitCode: exit.exitCode, signal: exit.signal, finishedAt, wait: null, ...kept, ...(neverStarted !== null ? { logPath: neverStarted } : {}) }, { ...(message ? { message } : {}), ...figures });
    if (message) this.deps.logger.warn({ runId: run.runId, fetcher: run.fetcher, reason }, message);
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
    if (state.run.status !== 'waiting' || state.ending || state.run.reason === 'starting') return;
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
    void this.move(state, 'waiting', { wait: reason });
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

  private newRun(entry: CatalogEntry, status: RunStatus, trigger: RunTrigger, args: string[], reason: RunReason | null): StoredRun {
    return {
      runId: newRunId(), fetcher: entry.name, pool: this.deps.poolOf(entry), status, trigger, args,
      enqueuedAt: this.deps.clock.now().toISOString(), startedAt: null, finishedAt: null, slot: null, pid: null,
      exitCode: null, signal: null, reason, wait: null, logPath: null, startTime: null, statusFile: null,
      ownerPid: this.deps.self.pid, ownerStartTime: this.deps.self.startTime,
    };
  }

  statusDir(): string {
    return path.join(this.deps.config.homeDir, 'runs');
  }
}

/** Opens a run's log for appending; the folder is made only when missing (also if a cleaner removed it). */
function openLog(logPath: string, logDir: string): number {
  try {
    return fs.openSync(logPath, 'a', 0o644);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    fs.mkdirSync(logDir, { recursive: true });
    return fs.openSync(logPath, 'a', 0o644);
  }
}
