import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { RunInfo, RunStatus, RunTrigger, WaitReason } from '../../shared/protocol';
import { isGithubSync, type Catalog, type CatalogEntry } from '../catalog/catalog';
import type { Config } from '../config/config';
import { InvalidArgumentError, UnknownRunError } from '../errors';
import { newRunId } from './newRunId';
import { validateArgs } from './validateArgs';
import { fetcherEnv } from './fetcherEnv';
import { fetcherUmask } from '../config/umask';
import type { Logger } from '../log/logger';
import { readProcInfo } from '../slots/procInfo';
import type { SlotPool } from '../slots/slotPool';
import type { TelemetrySink } from '../telemetry/telemetrySink';
import { CancelledError, groupOf, newActiveRun, ownerAlive, runEventId, stopTimers, terminateGroup, type ActiveRun } from './activeRun';
import { LogCapper } from './logCap';
import { Retention } from './retention';
import { runMembers } from './runGroup';
import { spawnRun, watchRun, type ExitInfo } from './runProcess';
import { toRunInfo, type RunStore, type StoredRun } from './runStore';
import type { InAgentWork, RunMoves } from './runMoves';
import { RunRefusedError, type GateRequest, type StartGate } from './startGate';

export interface RunManagerDeps {
  config: Config;
  catalog: Catalog;
  pools: ReadonlyMap<string, SlotPool>;
  poolOf(entry: CatalogEntry): string;
  gate: StartGate;
  telemetry: TelemetrySink;
  store: RunStore;
  logger: Logger;
  wrapperPath: string;
  /** Called after every change of a run, and of a pool's occupancy (for the state hub). */
  onRunChange(run: RunInfo): void;
  onPoolChange(pool: string): void;
  /** Runs the GitHub sync entries (`kind: github-sync`) inside the agent; without it they are refused. */
  github?: InAgentWork;
}

const TERMINAL: readonly RunStatus[] = ['completed', 'failed', 'cancelled', 'skipped'];

/**
 * A run's life: waiting (disk gate, then a pool slot, in that order) → running (a wrapper process
 * holding the slot's lock) → completed, failed or cancelled, with telemetry at each step.
 */
export class RunManager {
  private readonly active = new Map<string, ActiveRun>();
  private readonly finishWaiters = new Map<string, Array<(run: RunInfo) => void>>();
  private readonly self = readProcInfo(process.pid);
  private readonly logCapper: LogCapper;
  private retention: Retention | null = null;
  /** Held while someone awaits a run's end: the fetcher and the timers are unref'd, the answer is not. */
  private waitKeepAlive: NodeJS.Timeout | null = null;
  private intake = true;
  private closed = false;

  constructor(private readonly deps: RunManagerDeps) {
    fs.mkdirSync(this.statusDir(), { recursive: true, mode: 0o700 });
    this.logCapper = new LogCapper(deps.config.logCapBytes);
  }

  enqueue(fetcher: string, args: string[], trigger: RunTrigger): RunInfo {
    if (!this.intake) throw new InvalidArgumentError('the agent is stopping and takes no new runs');
    const entry = this.deps.catalog.resolve(fetcher);
    validateArgs(args, entry);
    const runId = newRunId();
    const run: StoredRun = {
      runId,
      fetcher: entry.name,
      pool: this.deps.poolOf(entry),
      status: 'waiting',
      trigger,
      args,
      enqueuedAt: new Date().toISOString(),
      startedAt: null,
      finishedAt: null,
      slot: null,
      pid: null,
      exitCode: null,
      signal: null,
      reason: null,
      wait: null,
      logPath: null,
      startTime: null,
      statusFile: null,
      ownerPid: process.pid,
      ownerStartTime: this.self?.startTime ?? 0,
    };
    const state = newActiveRun(run, entry);
    this.active.set(runId, state);
    this.changed(state);
    state.driving = this.drive(state);
    return toRunInfo(run);
  }

  /** Records a run that was due but not started (the schedule's "already running"). */
  recordSkipped(fetcher: string, reason: string, trigger: RunTrigger): RunInfo {
    const entry = this.deps.catalog.resolve(fetcher);
    const now = new Date().toISOString();
    const run: StoredRun = {
      runId: newRunId(), fetcher: entry.name, pool: this.deps.poolOf(entry), status: 'skipped', trigger, args: [],
      enqueuedAt: now, startedAt: null, finishedAt: now, slot: null, pid: null, exitCode: null, signal: null, reason,
      wait: null, logPath: null, startTime: null, statusFile: null, ownerPid: process.pid, ownerStartTime: this.self?.startTime ?? 0,
    };
    this.deps.store.save(run);
    this.deps.onRunChange(toRunInfo(run));
    this.emit(run, 'skipped', { reason });
    return toRunInfo(run);
  }

  get(runId: string): RunInfo | null {
    const state = this.active.get(runId);
    if (state) return toRunInfo(state.run);
    const stored = this.deps.store.get(runId);
    return stored ? toRunInfo(stored) : null;
  }

  activeRuns(): RunInfo[] {
    return [...this.active.values()].map((s) => toRunInfo(s.run));
  }

  activeRunOf(fetcher: string): RunInfo | null {
    for (const s of this.active.values()) if (s.run.fetcher === fetcher) return { ...s.run };
    return null;
  }

  isOwnRun(runId: string): boolean {
    return this.active.has(runId);
  }

  /** Resolves with the run once it has finished. */
  waitRun(runId: string): Promise<RunInfo> {
    const known = this.get(runId);
    if (!known) return Promise.reject(new UnknownRunError(runId));
    if (TERMINAL.includes(known.status) && !this.active.has(runId)) return Promise.resolve(known);
    this.waitKeepAlive ??= setInterval(() => {}, 1 << 30);
    return new Promise((resolve) => {
      const list = this.finishWaiters.get(runId) ?? [];
      list.push(resolve);
      this.finishWaiters.set(runId, list);
    });
  }

  /**
   * Cancels a run: a waiting run leaves its queue; a running one gets SIGTERM on its whole process
   * group, then SIGKILL after the grace period. Returns at once; `waitRun` tells when it has ended
   * (only after no process of the group is left).
   */
  cancel(runId: string): RunInfo {
    const state = this.active.get(runId);
    if (!state) {
      if (this.deps.store.get(runId)) throw new InvalidArgumentError(`run ${runId} is not active; nothing to cancel`);
      throw new UnknownRunError(runId);
    }
    if (state.cancelRequested) return toRunInfo(state.run);
    state.cancelRequested = true;
    this.emit(state.run, 'cancel-requested', {});
    if (state.run.status === 'waiting' || isGithubSync(state.entry)) {
      state.abort.abort(new CancelledError('cancelled', state.run.status === 'waiting' ? 'cancelled while waiting' : 'cancelled'));
    } else if (state.run.pid) {
      terminateGroup(state, this.deps.config.cancelGraceSeconds, this.deps.logger);
    }
    return toRunInfo(state.run);
  }

  /**
   * Stops taking new runs; running fetchers go on unless `stopFetchers`. Runs still waiting end
   * `cancelled` with reason `agent-stopping` (state, telemetry and waiting clients all learn it) before
   * the manager closes: a queued run belongs to whoever asked for it, and starting it later, when a
   * next agent happens to come up, could run a fetcher hours after its requester (a cron line, a
   * waiting CLI) gave up on it, or twice when the schedule asks again.
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
    this.logCapper.close();
    this.retention?.close();
    if (this.waitKeepAlive) clearInterval(this.waitKeepAlive);
    // From here on the runs belong to whoever adopts them next; this process records nothing more.
    this.closed = true;
    for (const state of this.active.values()) stopTimers(state);
  }

  /** The agent's periodic pruning of ended runs' logs and status files (applied now, then hourly). */
  startRetention(): void {
    const { config } = this.deps;
    this.retention ??= new Retention({
      logDir: config.logDir,
      statusDir: this.statusDir(),
      days: config.retention.days,
      runs: config.retention.runs,
      // Runs of any process (an in-process CLI run, a run another agent left) keep their files.
      activeRunIds: () => new Set([...this.active.keys(), ...this.deps.store.active().map((r) => r.runId)]),
      logger: this.deps.logger,
    });
    this.retention.start();
  }

  /**
   * At start: runs left `running` by a process that is gone are adopted if their fetcher still lives
   * (their slot is still held by it), or finished from the wrapper's status file if it has ended.
   */
  adoptLeftovers(): void {
    for (const stored of this.deps.store.active()) {
      if (this.active.has(stored.runId) || ownerAlive(stored)) continue;
      let entry: CatalogEntry;
      try {
        entry = this.deps.catalog.resolve(stored.fetcher);
      } catch {
        entry = { name: stored.fetcher, pool: stored.pool, argv: ['?'], demo: false };
      }
      const state = newActiveRun({ ...stored }, entry);
      if (isGithubSync(entry) && (stored.status === 'running' || stored.reason === 'hibernating')) {
        // A sync left by a dead agent: the next leg (now, or at its wake-up time) is this agent's.
        if (!this.deps.github?.adopt(state, this.moves)) continue;
        Object.assign(state.run, { ownerPid: process.pid, ownerStartTime: this.self?.startTime ?? 0, slot: null });
        this.active.set(stored.runId, state);
        this.changed(state);
        continue;
      }
      if (stored.status === 'waiting') {
        this.finish(state, 'failed', 'owner-exited-while-waiting', { exitCode: null, signal: null });
        continue;
      }
      state.run.ownerPid = process.pid;
      state.run.ownerStartTime = this.self?.startTime ?? 0;
      this.active.set(stored.runId, state);
      this.deps.logger.info({ runId: stored.runId, fetcher: stored.fetcher, pid: stored.pid }, 'adopted a run left by a previous agent');
      const watch = watchRun(groupOf(state.run), stored.statusFile ?? '', null, (pids) => this.onLingering(state, pids));
      state.watch = watch;
      if (stored.logPath) this.logCapper.watch(stored.logPath);
      this.startHeartbeat(state);
      this.changed(state);
      void watch.ended.then((exit) => this.onExit(state, exit));
    }
  }

  private async drive(state: ActiveRun): Promise<void> {
    const { run, entry } = state;
    const request: GateRequest = { runId: run.runId, fetcher: run.fetcher, expectedBytes: !isGithubSync(entry) && entry.expectedSizeMb !== undefined ? entry.expectedSizeMb * 1024 * 1024 : null };
    const pool = this.deps.pools.get(run.pool);
    try {
      if (!pool) throw new RunRefusedError('no-such-pool', `pool ${run.pool} is not configured`);
      await this.deps.gate.waitToStart(request, state.abort.signal, (reason) => this.setWait(state, reason));
      const grant = await pool.acquire(run.runId, state.abort.signal, (position) => this.setWait(state, { kind: 'pool', position }));
      if (state.abort.signal.aborted || state.cancelRequested) {
        // Cancelled (or the agent stopping) between the grant and this continuation: give the slot straight back.
        grant.lock.closeOwnCopy();
        pool.released();
        const reason: unknown = state.abort.signal.reason;
        throw reason instanceof CancelledError ? reason : new CancelledError('cancelled', 'cancelled while waiting');
      }
      if (isGithubSync(entry)) {
        if (!this.deps.github) {
          grant.lock.closeOwnCopy();
          pool.released();
          throw new RunRefusedError('github-sync-unavailable', 'GitHub syncs run only in the agent');
        }
        this.deps.github.begin(state, grant, this.moves);
        this.deps.gate.runStarted(request);
        return;
      }
      try {
        this.start(state, grant.index, grant.lock.fd);
        grant.lock.writeRecord({ pid: run.pid!, startTime: run.startTime!, fetcher: run.fetcher, runId: run.runId, since: run.startedAt!, agentPid: process.pid });
      } finally {
        grant.lock.closeOwnCopy();
      }
    } catch (err) {
      if (state.run.status === 'running') {
        // The fetcher runs; only its owner record could not be written. It is still watched and finished.
        this.deps.logger.error({ err, runId: run.runId }, 'could not write the slot owner record');
      } else if (err instanceof CancelledError) this.finish(state, 'cancelled', err.reason, { exitCode: null, signal: null });
      else if (err instanceof RunRefusedError) this.finish(state, 'failed', err.reason, { exitCode: null, signal: null }, err.message);
      else this.finish(state, 'failed', 'start-error', { exitCode: null, signal: null }, (err as Error).message);
      return;
    }
    this.deps.gate.runStarted(request);
    // Published again now that the lock file names this run (the status change came before the record).
    this.deps.onPoolChange(run.pool);
  }

  /** The moves of in-agent work (runMoves.ts), on this manager's states and telemetry. */
  private readonly moves: RunMoves = {
    running: (state, slot, detail) => {
      const resumed = state.run.startedAt !== null;
      Object.assign(state.run, { status: 'running', startedAt: state.run.startedAt ?? new Date().toISOString(), slot, pid: null, reason: null, wait: null });
      this.changed(state);
      if (resumed) this.emit(state.run, 'resumed', { slot, ...detail });
      else this.emit(state.run, 'start', { slot, host: os.hostname(), pid: process.pid, trigger: state.run.trigger, ...detail });
      if (!state.heartbeat) this.startHeartbeat(state);
    },
    hibernating: (state, until, detail) => {
      Object.assign(state.run, { status: 'waiting', slot: null, reason: 'hibernating', wait: { kind: 'hibernating', until: until.toISOString() } });
      this.changed(state);
      this.emit(state.run, 'hibernated', { until: until.toISOString(), ...detail });
    },
    setWait: (state, wait) => {
      if (state.run.status !== 'waiting') return;
      state.run.wait = wait;
      this.changed(state);
    },
    finish: (state, status, reason, exitCode, message) => this.finish(state, status, reason, { exitCode, signal: null }, message),
  };

  private start(state: ActiveRun, slot: number, lockFd: number): void {
    const { run, entry } = state;
    if (isGithubSync(entry)) throw new Error('a GitHub sync has no process to start');
    const { config } = this.deps;
    fs.mkdirSync(config.logDir, { recursive: true });
    const logPath = path.join(config.logDir, `${run.fetcher}-${run.runId}.log`);
    const statusFile = path.join(this.statusDir(), `${run.runId}.exit`);
    const logFd = fs.openSync(logPath, 'a', 0o644);
    try {
      const proc = spawnRun({
        wrapperPath: this.deps.wrapperPath,
        statusFile,
        argv: [...entry.argv, ...run.args],
        cwd: entry.cwd ?? config.dataDir,
        env: fetcherEnv({ base: process.env, entryEnv: entry.env, passEnv: entry.passEnv, fetcherUmask: fetcherUmask(), run: { DATA_DIR: config.dataDir, QUANTILICA_RUN_ID: run.runId, QUANTILICA_FETCHER: run.fetcher, QUANTILICA_POOL: run.pool, QUANTILICA_SLOT: String(slot) } }),
        logFd,
        lockFd,
      });
      Object.assign(run, { status: 'running', startedAt: new Date().toISOString(), slot, pid: proc.pid, startTime: proc.startTime, logPath, statusFile, wait: null });
      this.changed(state);
      this.emit(run, 'start', { slot, argv: [...entry.argv, ...run.args], host: os.hostname(), pid: proc.pid, trigger: run.trigger });
      this.startHeartbeat(state);
      this.logCapper.watch(logPath);
      state.watch = watchRun(groupOf(run), statusFile, proc.exited, (pids) => this.onLingering(state, pids));
      void state.watch.ended.then((exit) => this.onExit(state, exit));
    } finally {
      fs.closeSync(logFd);
    }
  }

  private startHeartbeat(state: ActiveRun): void {
    state.heartbeat = setInterval(() => this.emit(state.run, 'heartbeat', state.lingering.length > 0 ? { pid: state.run.pid, lingering: this.refreshLingering(state) } : { pid: state.run.pid }), this.deps.config.heartbeatSeconds * 1000);
    state.heartbeat.unref();
  }

  /**
   * The wrapper has ended but processes of the run live on and hold its slot (`sleep 300 & exit 0`,
   * or the wrapper was killed): the run stays `running`, with reason `lingering`, until they are
   * gone, so the slot is accounted for and `cancel` can still reach them (README, "How a run works").
   */
  private onLingering(state: ActiveRun, pids: number[]): void {
    if (this.closed) return;
    state.lingering = pids;
    state.run.reason = 'lingering';
    this.changed(state);
    this.emit(state.run, 'heartbeat', { pid: state.run.pid, lingering: pids });
    this.deps.logger.warn({ runId: state.run.runId, fetcher: state.run.fetcher, lingering: pids }, `the run's wrapper has ended but ${pids.length} of its processes still live and hold its slot; the run ends when they do (cancel stops them)`);
  }

  private refreshLingering(state: ActiveRun): number[] {
    state.lingering = runMembers(groupOf(state.run));
    return state.lingering;
  }

  private onExit(state: ActiveRun, exit: ExitInfo): void {
    // Closed, or already finished (a watch stopped by `finish` resolves too).
    if (this.closed || this.active.get(state.run.runId) !== state) return;
    if (state.cancelRequested) {
      // The watch ended only once no process of the group was left (killed after the grace period).
      this.finish(state, 'cancelled', 'cancelled', exit);
      return;
    }
    if (exit.unknown) this.finish(state, 'failed', 'exit-status-unknown', exit, 'the run ended while no agent watched it and left no exit status');
    else this.finish(state, exit.exitCode === 0 ? 'completed' : 'failed', exit.exitCode === 0 ? null : exit.signal ? 'signal' : 'exit-code', exit);
  }

  private finish(state: ActiveRun, status: RunStatus, reason: string | null, exit: ExitInfo, message?: string): void {
    if (this.closed) return;
    const { run } = state;
    // A run that ended while no agent watched it ended when its status file was written, not when
    // it was noticed.
    const finishedAt = exit.endedAt ?? new Date();
    Object.assign(run, { status, reason, exitCode: exit.exitCode, signal: exit.signal, finishedAt: finishedAt.toISOString(), wait: null });
    stopTimers(state);
    if (run.logPath) this.logCapper.unwatch(run.logPath);
    const duration = run.startedAt ? Math.max(0, (finishedAt.getTime() - Date.parse(run.startedAt)) / 1000) : 0;
    this.active.delete(run.runId);
    // The finish event is spooled before the run's terminal state is saved: a crash in between leaves
    // the run `running` in the store, the next agent adopts it and emits the same finish again, under
    // the same event id, which PostgreSQL keeps once.
    this.emit(run, 'finish', { status, exitCode: exit.exitCode, signal: exit.signal, durationSeconds: duration, reason, message: message ?? null });
    this.changed(state);
    if (message) this.deps.logger.warn({ runId: run.runId, fetcher: run.fetcher, reason }, message);
    this.deps.gate.runEnded(run.runId);
    // The pool itself was published with the run's status change above.
    if (run.slot !== null && !isGithubSync(state.entry)) this.deps.pools.get(run.pool)?.released();
    const waiters = this.finishWaiters.get(run.runId) ?? [];
    this.finishWaiters.delete(run.runId);
    if (this.finishWaiters.size === 0 && this.waitKeepAlive) {
      clearInterval(this.waitKeepAlive);
      this.waitKeepAlive = null;
    }
    for (const resolve of waiters) resolve(toRunInfo(run));
  }

  private setWait(state: ActiveRun, reason: WaitReason): void {
    if (state.run.status !== 'waiting') return;
    if (JSON.stringify(state.run.wait) === JSON.stringify(reason)) return;
    // Telemetry records that a run had to wait, and why, once: a run that starts at once has no
    // `waiting` event (and costs one durable spool write less on the way to its spawn).
    if (state.run.wait === null) this.emit(state.run, 'waiting', { trigger: state.run.trigger, args: state.run.args, reason });
    state.run.wait = reason;
    this.changed(state);
  }

  private changed(state: ActiveRun): void {
    this.deps.store.save(state.run);
    this.deps.onRunChange(toRunInfo(state.run));
  }

  private emit(run: StoredRun, event: 'start' | 'heartbeat' | 'finish' | 'waiting' | 'skipped' | 'cancel-requested' | 'hibernated' | 'resumed', payload: Record<string, unknown>): void {
    // A run starts and finishes once: those two events get ids derived from the run, so emitting one
    // again (after a crash) cannot make a second row.
    const eventId = event === 'start' || event === 'finish' ? runEventId(run.runId, event) : undefined;
    this.deps.telemetry.emit({ runId: run.runId, event, task: run.fetcher, pool: run.pool, payload, eventId });
  }

  private statusDir(): string {
    return path.join(this.deps.config.homeDir, 'runs');
  }
}
