import { isFinalStatus, type RunInfo, type RunReason, type RunTrigger } from '../../shared/protocol';
import { isGithubSync, type CatalogEntry } from '../catalog/catalog';
import { InvalidArgumentError, UnknownRunError } from '../errors';
import { oomWarning } from '../memory/oomWarning';
import { tailFd, tailFile } from './logCap';
import { CancelledError, newActiveRun, ParkedError, type ActiveRun } from './activeRun';
import { appendAgentLines, neverStartedLines, runLogPath } from './agentRunLog';
import { newRunId } from './newRunId';
import { QueuePositions } from './queuePositions';
import { RunAdoption } from './runAdoption';
import type { EndOptions, EndStatus, RunCore } from './runCore';
import { cancelRequested, reacts, requestCancel, type ManagerPhase } from './runGuards';
import type { RunManagerDeps } from './runManagerDeps';
import type { ExitInfo } from './runProcess';
import { RunStart } from './runStart';
import { toRunInfo, type StoredRun } from './runStore';
import { draft, FINISH_MOVES, transition, type MoveDetail, type RunFields, type TransitionPorts } from './runTransitions';
import { isRetryable, retryDelayMs, runPolicy, type RunPolicy } from './runPolicy';
import type { RunMoves } from './runMoves';
import { RunUpkeep } from './runUpkeep';
import { statusDirOf } from './statusDir';
import { validateArgs } from './validateArgs';

export type { RunManagerDeps } from './runManagerDeps';

/**
 * A run's life: waiting (disk gate, then a pool slot, in that order) → running (a wrapper process
 * holding the slot's lock) → completed, failed or cancelled. Every change is a named move of
 * RUN_MOVES (runTransitions.ts): state and telemetry in one durable commit, then published. The
 * manager owns the runs of this process, their cancel, their end and its own shutdown; the way to a
 * start (runStart.ts), the runs a dead process left (runAdoption.ts) and the queue positions
 * (queuePositions.ts) are its parts.
 */
export class RunManager {
  private readonly active = new Map<string, ActiveRun>();
  private readonly finishWaiters = new Map<string, Array<(run: RunInfo) => void>>();
  private readonly upkeep: RunUpkeep;
  private readonly ports: TransitionPorts;
  private readonly positions: QueuePositions;
  private readonly starter: RunStart;
  private readonly adoption: RunAdoption;
  /** Held while someone awaits a run's end: the fetcher and the timers are unref'd, the answer is not. */
  private waitKeepAlive: NodeJS.Timeout | null = null;
  private phase: ManagerPhase = 'open';

  constructor(private readonly deps: RunManagerDeps) {
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
      record: (event) => {
        if (this.phase !== 'closed') void deps.journal.record(event);
      },
      onLingering: (state, pids) => this.onLingering(state, pids),
      onEnded: (state, exit) => this.onExit(state, exit),
      onDeadline: (state) => this.onDeadline(state),
      onStall: (state, stalled) => this.onStall(state, stalled),
    });
    this.positions = new QueuePositions(this.ports, (state) => this.active.get(state.run.runId) === state);
    const core: RunCore = {
      deps,
      ports: this.ports,
      active: this.active,
      upkeep: this.upkeep,
      moves: this.moves,
      entryOf: (stored) => this.entryOf(stored),
      policyOf: (entry, pool) => this.policyOf(entry, pool),
      finish: (state, status, reason, exit, options) => this.finish(state, status, reason, exit, options),
      statusDir: () => this.statusDir(),
    };
    this.starter = new RunStart(core, this.positions);
    this.adoption = new RunAdoption(core, this.starter);
  }

  /** Queues a run; resolves once its `waiting` state is durable. */
  async enqueue(fetcher: string, args: string[], trigger: RunTrigger): Promise<RunInfo> {
    if (this.phase !== 'open') throw new InvalidArgumentError('the agent is stopping and takes no new runs');
    const entry = this.deps.catalog.resolve(fetcher);
    validateArgs(args, entry);
    const run = this.newRun(entry, trigger, args);
    const state = newActiveRun(run, entry, this.policyOf(entry, run.pool));
    this.active.set(run.runId, state);
    const recorded = transition(this.ports, run, 'enqueue');
    // The wait starts at once: a free slot's `starting` intent joins the same group commit.
    state.driving = this.starter.drive(state, recorded);
    await recorded;
    return toRunInfo(run);
  }

  /** Records a run that was due but not started (the schedule's "already running"). */
  async recordSkipped(fetcher: string, reason: RunReason, trigger: RunTrigger, detail: MoveDetail = {}): Promise<RunInfo> {
    const run = this.newRun(this.deps.catalog.resolve(fetcher), trigger, []);
    await transition(this.ports, run, 'skip', { reason, finishedAt: run.enqueuedAt }, detail);
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

  /** How many of this process's runs wait in each pool: a pool's picture needs the count, not a copy of every queued run. */
  waitingCounts(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const { run } of this.active.values()) if (run.status === 'waiting') counts.set(run.pool, (counts.get(run.pool) ?? 0) + 1);
    return counts;
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
    if (isFinalStatus(known.status) && !this.active.has(runId)) return Promise.resolve(known);
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
    if (!requestCancel(state)) return toRunInfo(state.run);
    void this.deps.journal.record({
      runId,
      event: 'cancel-requested',
      task: state.run.fetcher,
      pool: state.run.pool,
      payload: fromStation !== undefined ? { fromStation } : {},
    });
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
    const run = await this.adoption.cancelKept(runId);
    return run === null ? null : toRunInfo(run);
  }

  /**
   * Stops taking new runs; running fetchers go on unless `stopFetchers`. An agent's waiting runs
   * (queued, at the disk gate, in a retry backoff) stay waiting, durably, for the next agent to resume
   * in their order: the queue is work someone asked for. With `cancelWaiting` (and always for a CLI's
   * own runs, which no later agent resumes) they end `cancelled` with reason `agent-stopping`.
   * A run between its slot grant and its spawn is either put back in the queue or started and left running.
   */
  async shutdown(stopFetchers: boolean, cancelWaiting = false): Promise<void> {
    this.phase = 'draining';
    const drives: Array<Promise<void>> = [];
    for (const state of this.active.values()) {
      // An agent's run stays in the agent's queue, also while a CLI took it over (a retry of a run it adopted).
      const keep = !cancelWaiting && state.run.ownerRole === 'agent';
      // A hibernating sync stays as it is: the next agent wakes it at its time (it holds nothing now).
      if (state.run.status === 'waiting' && state.run.reason === 'hibernating') continue;
      if (state.run.status === 'waiting' || isGithubSync(state.entry)) {
        // A sync working inside the agent cannot outlive it: it ends `cancelled` (agent-stopping).
        state.abort.abort(
          keep && state.run.status === 'waiting'
            ? new ParkedError()
            : new CancelledError('agent-stopping', 'the agent stopped while the run waited'),
        );
        if (state.driving) drives.push(state.driving);
      } else if (stopFetchers) this.cancel(state.run.runId);
    }
    await Promise.all(drives);
    if (stopFetchers)
      await Promise.all([...this.active.values()].filter((s) => s.run.status === 'running').map((s) => this.waitRun(s.run.runId)));
    // A fetcher cancelled here and still in its cleanup outlives this agent: the next one records its end `cancelled`.
    await Promise.all(
      [...this.active.values()]
        .filter((s) => s.run.status === 'running' && cancelRequested(s) && !s.run.cancelAsked && !isGithubSync(s.entry))
        .map((s) => transition(this.ports, s.run, 'askCancel', { cancelAsked: true })),
    );
    this.upkeep.close();
    this.positions.close();
    this.starter.close();
    if (this.waitKeepAlive) clearInterval(this.waitKeepAlive);
    // From here on the runs belong to whoever adopts them next; this process records nothing more.
    this.phase = 'closed';
    for (const state of this.active.values()) this.upkeep.stop(state);
  }

  /** At start: runs left by a process that is gone (runAdoption.ts). */
  adoptLeftovers(): Promise<void> {
    return this.adoption.adoptLeftovers();
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

  /** The moves of in-agent work (runMoves.ts): each a named move like a fetcher's. */
  private readonly moves: RunMoves = {
    // In-agent work (a GitHub sync) writes its progress into the run's own log.
    start: (state, slot, detail, workLeftMs = null) =>
      transition(this.ports, state.run, 'start', this.legFields(state, slot, workLeftMs), detail),
    wake: (state, slot, detail, workLeftMs = null) =>
      transition(this.ports, state.run, 'wake', this.legFields(state, slot, workLeftMs), detail),
    hibernating: (state, until, detail, workLeftMs = null) =>
      transition(
        this.ports,
        state.run,
        'hibernate',
        { slot: null, reason: 'hibernating', wait: { kind: 'hibernating', until: until.toISOString() }, deadline: null, workLeftMs },
        detail,
      ),
    awaitingStorage: (state, wait, detail, workLeftMs = null) =>
      transition(this.ports, state.run, 'awaitStorage', { slot: null, reason: 'hibernating', wait, deadline: null, workLeftMs }, detail),
    setWait: (state, wait) => this.positions.setWait(state, wait),
    heartbeat: (state, payload) => {
      if (this.phase !== 'closed')
        void this.deps.journal.record({
          runId: state.run.runId,
          event: 'heartbeat',
          task: state.run.fetcher,
          pool: state.run.pool,
          payload,
        });
    },
    // The task is the agent's handle on the run, not the run's state: a shutdown awaits it.
    driving: (state, work) => {
      state.driving = work;
    },
    // The work has released its slot already: the end must not release it again.
    finish: (state, status, reason, exitCode, message) =>
      this.finish(state, status, reason, { exitCode, signal: null }, { message, slotGone: true }),
  };

  /** A leg of in-agent work runs on `slot`; the run's first start and log stay; its deadline is now plus the working time left. */
  private legFields(state: ActiveRun, slot: number, workLeftMs: number | null): RunFields {
    const { run } = state;
    const now = this.deps.clock.now();
    return {
      startedAt: run.startedAt ?? now.toISOString(),
      slot,
      pid: null,
      reason: null,
      wait: null,
      logPath: run.logPath ?? runLogPath(this.deps.config.logDir, run.fetcher, run.runId),
      deadline: workLeftMs === null ? null : new Date(now.getTime() + workLeftMs).toISOString(),
      workLeftMs,
    };
  }

  /**
   * The wrapper has ended but processes of the run live on and hold its slot (`sleep 300 & exit 0`,
   * or the wrapper was killed): the run stays `running`, with reason `lingering`, until they are
   * gone, so the slot is accounted for and `cancel` can still reach them (README, "How a run works").
   */
  private onLingering(state: ActiveRun, pids: number[]): void {
    if (!reacts(this.phase, state)) return;
    // A run being stopped for its deadline or a stall keeps that reason: it is how it will end.
    if (state.run.reason === 'timeout' || state.run.reason === 'stalled') return;
    void transition(
      this.ports,
      state.run,
      state.run.reason === 'lingering' ? 'lingerOn' : 'linger',
      { reason: 'lingering' },
      { lingering: pids },
    );
    this.deps.logger.warn(
      { runId: state.run.runId, fetcher: state.run.fetcher, lingering: pids },
      `the run's wrapper has ended but ${pids.length} of its processes still live and hold its slot; the run ends when they do (cancel stops them)`,
    );
  }

  private onExit(state: ActiveRun, exit: ExitInfo): void {
    if (!reacts(this.phase, state)) return;
    if (exit.cgroup) this.deps.memory?.ended(state.run.runId, state.run.pool, exit.cgroup);
    // A cancelled run's watch ended only once no process of the group was left.
    if (cancelRequested(state)) {
      void this.finish(state, 'cancelled', 'cancelled', exit);
      return;
    }
    if (state.run.reason === 'timeout') {
      void this.finish(state, 'failed', 'timeout', exit, {
        message: `the run passed its timeout (${state.policy.timeoutSeconds ?? '?'} s) and was stopped`,
      });
      return;
    }
    if (state.run.reason === 'stalled') {
      void this.finish(state, 'cancelled', 'stalled', exit, {
        message: `the run's log did not grow for ${state.policy.stallSeconds ?? '?'} s; cancelled (onStall: cancel)`,
      });
      return;
    }
    // memory ceilings: a run whose process the OOM killer took at its (or its pool's) ceiling failed
    // for that reason, told by the cgroup's counter, not guessed from a SIGKILL.
    const usage = this.deps.memory?.release(state.run.runId) ?? null;
    if (usage?.oomKilled && exit.exitCode !== 0)
      void this.finish(state, 'failed', 'memory-limit', exit, {
        message: `the run reached its memory ceiling (${usage.memoryLimitMb ?? '?'} MB) and was killed`,
        usage,
      });
    else if (exit.unknown)
      void this.finish(state, 'failed', 'exit-status-unknown', exit, {
        message: 'the run ended while no agent watched it and left no exit status',
        usage,
      });
    else
      void this.finish(
        state,
        exit.exitCode === 0 ? 'completed' : 'failed',
        exit.exitCode === 0 ? null : exit.signal ? 'signal' : 'exit-code',
        exit,
        { usage },
      );
  }

  /** The try passed its deadline: its group gets TERM now, KILL after the grace; it ends `failed` (timeout). */
  private onDeadline(state: ActiveRun): void {
    if (!reacts(this.phase, state) || cancelRequested(state) || state.run.status !== 'running') return;
    this.deps.logger.warn(
      { runId: state.run.runId, fetcher: state.run.fetcher, deadline: state.run.deadline },
      `the run passed its timeout (${state.policy.timeoutSeconds ?? '?'} s); stopping it`,
    );
    void transition(this.ports, state.run, 'deadline', { reason: 'timeout' });
    this.upkeep.terminate(state);
  }

  /** The stall watchdog: marks the run stalled (or no longer), and cancels it when its policy says so. */
  private onStall(state: ActiveRun, stalled: boolean): void {
    if (!reacts(this.phase, state) || state.run.status !== 'running') return;
    if (!stalled) {
      void transition(this.ports, state.run, 'unstall', { stalledSince: null });
      return;
    }
    void transition(
      this.ports,
      state.run,
      'stall',
      { stalledSince: this.deps.clock.now().toISOString() },
      { stallSeconds: state.policy.stallSeconds },
    );
    this.deps.logger.warn(
      { runId: state.run.runId, fetcher: state.run.fetcher, logGrewAt: state.run.logGrewAt },
      `the run's log has not grown for ${state.policy.stallSeconds ?? '?'} s`,
    );
    if (state.policy.onStall !== 'cancel' || cancelRequested(state) || state.run.reason === 'timeout') return;
    void transition(this.ports, state.run, 'stallCancel', { reason: 'stalled' });
    this.upkeep.terminate(state);
  }

  /**
   * A try failed and its policy retries it: the slot is given back now, the run waits its backoff
   * (reason `retry-backoff`, the wake-up time recorded, so a next agent keeps it), then queues again.
   */
  private async retry(state: ActiveRun, reason: RunReason | null, exit: ExitInfo, { message, usage, slotGone }: EndOptions): Promise<void> {
    const { run } = state;
    this.upkeep.stop(state);
    const final = usage === undefined ? (this.deps.memory?.release(run.runId) ?? null) : usage;
    const next = (run.attempt ?? 1) + 1;
    const until = new Date(
      this.deps.clock.now().getTime() + retryDelayMs(state.policy, next, this.deps.random ? () => this.deps.random!() : undefined),
    ).toISOString();
    const hadSlot = run.slot !== null && slotGone !== true;
    // The move applies at once: from here a cancel finds the run waiting for its retry.
    const recorded = transition(
      this.ports,
      run,
      'retryWait',
      {
        reason: 'retry-backoff',
        wait: { kind: 'retry', until, attempt: next },
        exitCode: exit.exitCode,
        signal: exit.signal,
        slot: null,
        pid: null,
        startTime: null,
        statusFile: null,
        deadline: null,
        stalledSince: null,
        memoryMb: null,
        ...(final ? { peakMemoryMb: final.peakMemoryMb, cpuSeconds: final.cpuSeconds } : {}),
      },
      { failedFor: reason, until, ...(message ? { message } : {}) },
    );
    this.deps.gate.runEnded(run.runId);
    if (hadSlot) this.deps.pools.get(run.pool)?.released();
    state.lingering = [];
    state.driving = this.starter.backoff(state);
    await recorded;
    this.deps.logger.info(
      {
        runId: run.runId,
        fetcher: run.fetcher,
        attempt: next - 1,
        attempts: state.policy.attempts,
        exitCode: exit.exitCode,
        reason,
        until,
      },
      `try ${next - 1} of ${state.policy.attempts} failed; the next at ${until}`,
    );
  }

  /** The run's end (or, when its policy retries it, its try's end): `complete`, `fail` or `cancel`. */
  private async finish(
    state: ActiveRun,
    status: EndStatus,
    reason: RunReason | null,
    exit: ExitInfo,
    options: EndOptions = {},
  ): Promise<void> {
    if (!reacts(this.phase, state)) return;
    if (
      status !== 'completed' &&
      (state.run.attempt ?? 1) < state.policy.attempts &&
      isRetryable(state.policy, { status, reason, exitCode: exit.exitCode })
    ) {
      await this.retry(state, reason, exit, options);
      return;
    }
    const { message, usage, slotGone } = options;
    const { run } = state;
    this.upkeep.stop(state);
    // memory ceilings: the run's peak memory and CPU, kept with it and sent with its finish.
    const final = usage === undefined ? (this.deps.memory?.release(run.runId) ?? null) : usage;
    // OOM kills inside the run are kept and sent also when the fetcher exited 0 (a child was killed
    // at the ceiling and the fetcher went on): a warning on the run, never hidden by its exit code.
    const figures = final
      ? { peakMemoryMb: final.peakMemoryMb, cpuSeconds: final.cpuSeconds, memorySource: final.memorySource, oomKills: final.oomKills }
      : {};
    const kept = final ? { ...figures, memoryMb: null, memoryLimitMb: final.memoryLimitMb } : {};
    // A run that ended while no agent watched it ended when its status file was written.
    const finishedAt = (exit.endedAt ?? this.deps.clock.now()).toISOString();
    const neverStarted =
      run.startedAt === null && run.logPath === null ? runLogPath(this.deps.config.logDir, run.fetcher, run.runId) : null;
    if (neverStarted !== null && !appendAgentLines(neverStarted, neverStartedLines(toRunInfo(run), status, reason, message)))
      this.deps.logger.warn({ runId: run.runId }, 'could not write why the run never started into its log');
    const recorded = transition(
      this.ports,
      run,
      FINISH_MOVES[status],
      {
        reason,
        exitCode: exit.exitCode,
        signal: exit.signal,
        finishedAt,
        wait: null,
        ...kept,
        ...(neverStarted !== null ? { logPath: neverStarted } : {}),
        ...(slotGone === true ? { slot: null } : {}),
      },
      { ...(message ? { message } : {}), ...figures },
    );
    // The slot goes to the next run now, not after this commit: commits keep their order, so the next
    // run's intent (markStarting, awaited before its spawn) is durable only with this end, and under a
    // burst both share one fsync rather than one each on the slot's way.
    this.deps.gate.runEnded(run.runId);
    if (run.slot !== null) this.deps.pools.get(run.pool)?.released();
    await recorded;
    if (message) this.deps.logger.warn({ runId: run.runId, fetcher: run.fetcher, reason }, message);
    else if (final?.oomKills)
      this.deps.logger.warn(
        { runId: run.runId, fetcher: run.fetcher, oomKills: final.oomKills },
        `${oomWarning(final.oomKills)} (run ${run.runId} ended ${status} ${exit.exitCode ?? ''})`,
      );
    this.active.delete(run.runId);
    if (this.active.size === 0) this.deps.onIdle?.();
    const waiters = this.finishWaiters.get(run.runId) ?? [];
    this.finishWaiters.delete(run.runId);
    if (this.finishWaiters.size === 0 && this.waitKeepAlive) {
      clearInterval(this.waitKeepAlive);
      this.waitKeepAlive = null;
    }
    for (const resolve of waiters) resolve(toRunInfo(run));
  }

  /** A run not recorded yet: its first move (`enqueue` or `skip`) records it. */
  private newRun(entry: CatalogEntry, trigger: RunTrigger, args: string[]): StoredRun {
    const pool = this.deps.poolOf(entry);
    const now = this.deps.clock.now().toISOString();
    return draft({
      runId: newRunId(),
      fetcher: entry.name,
      pool,
      status: 'waiting',
      trigger,
      args,
      enqueuedAt: now,
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
      ownerPid: this.deps.self.pid,
      ownerStartTime: this.deps.self.startTime,
      ownerRole: this.deps.self.role ?? 'cli',
      attempt: 1,
      attempts: this.policyOf(entry, pool).attempts,
      waitSince: now,
    });
  }

  statusDir(): string {
    return statusDirOf(this.deps.config.homeDir);
  }
}
