import * as os from 'node:os';
import * as path from 'node:path';
import { PROTOCOL_VERSION, SERIAL_POOL, type AgentInfo, type GetMetrics, type ListEvents, type PoolState, type RunInfo, type ScheduleStatus } from '../shared/protocol';
import { Catalog } from './catalog/catalog';
import { GithubRuns } from './github/githubRuns';
import { demoCatalog } from './catalog/demoCatalog';
import type { Config } from './config/config';
import { InvalidArgumentError, UnknownRunError } from './errors';
import type { Logger } from './log/logger';
import { MemoryCeilings } from './memory/memoryCeilings';
import { SERIAL_LOCK_FILE } from './checkStationDirs';
import { distFile } from './paths';
import { processSpawner } from './runs/processSpawner';
import type { RunSpawner } from './runs/runPorts';
import { ThreadSpawner } from './runs/threadSpawner';
import { NativeSpawner } from './runs/nativeSpawner';
import { Retention } from './runs/retention';
import { RunManager } from './runs/runManager';
import { systemClock } from './runs/runPorts';
import { spoolJournal } from './runs/spoolJournal';
import { RunStore, toRunInfo } from './runs/runStore';
import { openGate, type StartGate } from './runs/startGate';
import type { AgentControl, FlushResult } from './server/agentControl';
import { readProcInfo } from '../shared/node/procInfo';
import { readKernelFlocks, type KernelLock } from './flock/procLocks';
import { SlotPool, type ReclaimEvent } from './slots/slotPool';
import { PgRunCancel } from './slots/pgRunCancel';
import { PgSlotBackend } from './slots/pgSlotBackend';
import { PgSlotPool } from './slots/pgSlotPool';
import type { PoolBackend } from './slots/poolBackend';
import type { StationPolicy } from './station/stationPolicy';
import type { SnapshotParts, StateHub } from './state/stateHub';
import { PublishThrottle, throttleClock } from './state/publishThrottle';
import { otherModeHolders } from './slots/otherModeHolders';
import { ForeignRuns } from './runs/foreignRuns';
import type { Spool } from './telemetry/spool';

/**
 * What the core is built on (agent/openAgent.ts builds them, in order, before it); the optional ones
 * fall back to embedded defaults so a test can run the core alone.
 */
export interface AgentParts {
  /** Made first: everything publishes into it from its first moment, so no change is lost. */
  hub: StateHub;
  /** The station's checked folders (checkStationDirs, called once by whoever builds the parts). */
  policy: StationPolicy;
  gate?: StartGate;
  /** The spool: telemetry events, and the run state beside them (one database, one transaction per move). */
  telemetry: Spool;
  flush?: (onProgress: (sent: number, remaining: number) => void) => Promise<FlushResult>;
  setSchedulePaused?: (paused: boolean, fetcher?: string) => ScheduleStatus;
  /** The operator events and the metrics (agent/events, agent/metrics), made by the composition root. */
  listEvents?: AgentControl['listEvents'];
  metrics?: AgentControl['metrics'];
  /** The agent adopts GitHub syncs a dead agent left; an in-process CLI (the default) does not. */
  role?: 'agent' | 'cli';
}

/** Finished runs a snapshot carries besides the active ones: what a client lists before it asks for more. */
const SNAPSHOT_RECENT_RUNS = 50;

/**
 * The pools' pictures: a change after a quiet window is published at once; changes inside the window
 * after a publication wait for one trailing publication at its end. Each computation reads
 * /proc/locks, lstats and opens every slot file, and a burst of runs changes a pool several times per
 * run: publishing each change cost the main thread about a seventh of its time. 30 ms keeps a burst
 * to about thirty pictures a second while a slot change reaches the views within 30 ms (a snapshot is
 * always computed fresh). Under load one computation takes longer (the lock table grows, /proc reads
 * wait): the window then grows with it, to three times the last one's cost, so publishing takes at
 * most about a quarter of the thread and a change still reaches the views within 100 ms (a tenth
 * held a slow picture back for 150-200 ms at 100 waiting runs; the slots benchmark's throughput is
 * the same with either).
 */
const POOL_PUBLISH_WINDOW_MS = 30;
const POOL_PUBLISH_COST_SHARE = 3;

/** The orchestration core shared by the agent and an in-process CLI run: catalog, pools, runs, state. */
export class Orchestrator implements AgentControl {
  readonly hub: StateHub;
  readonly catalog: Catalog;
  readonly pools = new Map<string, PoolBackend>();
  private readonly spawner: RunSpawner & { close?(): Promise<void> };
  /** The shared slot database with QUANTILICA_SLOT_BACKEND=postgres (opened by `openSlots`). */
  readonly slotBackend: PgSlotBackend | null;
  /** Cancels of runs held or queued on other stations, and of ours asked by them. */
  private readonly remoteCancel: PgRunCancel | null;
  readonly runs: RunManager;
  /** Runs of the shared store another process of this user manages (a CLI run started with no agent). */
  readonly foreign: ForeignRuns;
  readonly store: RunStore;
  /** memory ceilings */
  readonly memory: MemoryCeilings;
  readonly github: GithubRuns;
  private readonly startedAt = new Date().toISOString();
  private readonly lastStatus = new Map<string, RunInfo['status']>();
  private retention: Retention | null = null;
  /** Pools changed since their state was last published (see publishPool). */
  private readonly dirtyPools = new Set<string>();
  private readonly poolPublish = new PublishThrottle(() => this.publishDirtyPools(), throttleClock, { windowMs: POOL_PUBLISH_WINDOW_MS, costShare: POOL_PUBLISH_COST_SHARE });
  private poolsClosed = false;

  constructor(readonly config: Config, private readonly logger: Logger, private readonly parts: AgentParts) {
    this.hub = parts.hub;
    this.catalog = config.catalogPath ? Catalog.load(config.catalogPath) : demoCatalog(config);
    this.slotBackend = config.slots.backend === 'postgres' && config.slots.databaseUrl !== null
      ? new PgSlotBackend({ url: config.slots.databaseUrl, station: config.slots.station, defaults: this.defaultSizes(), logger })
      : null;
    this.remoteCancel = this.slotBackend ? new PgRunCancel(this.slotBackend, logger) : null;
    this.createPools(parts.policy);
    // The run state lives in the spool's database; a state.db of an earlier version is moved in.
    this.store = new RunStore(parts.telemetry, path.join(config.homeDir, 'state.db'), logger);
    // memory ceilings: pools' cgroups made, and those an earlier agent left taken over or removed,
    // before the run manager adopts that agent's runs.
    this.memory = new MemoryCeilings({
      pools: this.poolCeilings(), reserveMb: config.memory.reserveMb, cgroupName: config.memory.cgroupName, homeDir: config.homeDir, logger,
      support: config.memory.enforce ? undefined : { kind: 'not-enforced', reason: 'disabled-by-setting' },
    });
    const activeIds = new Set(this.store.active().map((r) => r.runId));
    this.memory.adoptLeftovers((runId) => activeIds.has(runId));
    // The agent's fetchers are forked by the small native spawner, else by a worker thread (the hot
    // path); a one-run CLI forks its one fetcher itself.
    this.spawner = parts.role !== 'agent' ? processSpawner
      : config.spawner === 'native' ? new NativeSpawner(distFile('quantilica-spawner'), new ThreadSpawner(), logger)
        : new ThreadSpawner();
    this.github = new GithubRuns({ config, logger, pools: this.pools, adopts: parts.role === 'agent', onSync: (sync) => this.hub.publish({ kind: 'sync', sync }) });
    this.runs = new RunManager({
      config,
      catalog: this.catalog,
      pools: this.pools,
      poolOf: (entry) => (config.usePools ? entry.pool : SERIAL_POOL),
      gate: parts.gate ?? openGate,
      journal: spoolJournal(parts.telemetry, this.store),
      // The agent spawns from a worker thread (the hot path); a one-run CLI needs no thread.
      spawner: this.spawner,
      clock: systemClock,
      self: { pid: process.pid, startTime: readProcInfo(process.pid)?.startTime ?? 0, role: parts.role ?? 'cli' },
      runTimeoutOf: (pool) => (config.pools[pool as keyof Config['pools']] ?? config.pools['heavy-io']).runTimeoutSeconds,
      diskMaxWaitSeconds: config.disk.maxWaitSeconds,
      logger,
      wrapperPath: distFile('runWrapper.sh'),
      memory: this.memory,
      onRunChange: (info) => {
        const run = this.withUsage(info);
        this.hub.publish({ kind: 'run', run });
        // A pool's waiting count moves when a run enters or leaves the queue, not on position updates.
        if (this.lastStatus.get(run.runId) !== run.status) {
          this.lastStatus.set(run.runId, run.status);
          if (run.status !== 'waiting' && run.status !== 'running') this.lastStatus.delete(run.runId);
          this.publishPool(run.pool);
        }
      },
      onPoolChange: (pool) => this.publishPool(pool),
      github: this.github,
    });
    this.foreign = new ForeignRuns({
      store: this.store,
      runs: this.runs,
      onEnded: (run) => {
        if (!this.hub.hasListeners()) return;
        this.hub.publish({ kind: 'run', run: toRunInfo(run) });
        this.publishPool(run.pool);
      },
    });
    if (this.catalog.entries.some((e) => e.kind === 'github-sync')) this.github.start();
  }

  /** Queues a run; resolves once it is durably recorded. */
  run(fetcher: string, args: string[], trigger: RunInfo['trigger']): Promise<RunInfo> {
    return this.runs.enqueue(fetcher, args, trigger);
  }

  /** The agent's periodic pruning of ended runs' logs and status files (applied now, then hourly). */
  startRetention(): void {
    const { config } = this;
    this.retention ??= new Retention({
      logDir: config.logDir,
      statusDir: this.runs.statusDir(),
      days: config.retention.days,
      runs: config.retention.runs,
      // Runs of any process (an in-process CLI run, a run another agent left) keep their files.
      activeRunIds: () => new Set([...this.runs.activeIds(), ...this.store.active().map((r) => r.runId)]),
      runRows: this.store,
      logger: this.logger,
    });
    this.retention.start();
  }

  async waitRun(runId: string): Promise<RunInfo> {
    if (this.foreign.active(runId)) return this.foreign.wait(runId);
    try {
      return await this.runs.waitRun(runId);
    } catch (err) {
      // A run of another station this process asked to cancel: its end is read from its answer.
      const remote = err instanceof UnknownRunError ? await this.remoteCancel?.waitEnd(runId) : null;
      if (remote) return remote;
      throw err;
    }
  }

  async cancel(target: { runId?: string; fetcher?: string }): Promise<RunInfo[]> {
    if (target.runId) {
      if (this.foreign.active(target.runId)) return [await this.foreign.cancel(target.runId)];
      try {
        return [this.runs.cancel(target.runId)];
      } catch (err) {
        // Not a run of this station: with the postgres backend its owner may be another station.
        if (!(err instanceof UnknownRunError) || !this.remoteCancel) throw err;
        return [await this.remoteCancel.request(target.runId)];
      }
    }
    if (target.fetcher) {
      const name = this.catalog.resolve(target.fetcher).name;
      const own = this.runs.activeRuns().filter((r) => r.fetcher === name).map((r) => this.runs.cancel(r.runId));
      const foreign = await Promise.all(this.foreign.activeOf(name).map((r) => this.foreign.cancel(r.runId)));
      return [...own, ...foreign];
    }
    throw new InvalidArgumentError('cancel needs a run id or a fetcher name');
  }

  listRuns(limit: number): RunInfo[] {
    const active = this.runs.activeRuns().map((r) => this.withUsage(r));
    const ids = new Set(active.map((r) => r.runId));
    const recent = this.store.recent(limit).filter((r) => !ids.has(r.runId)).map(toRunInfo);
    return [...active, ...recent].slice(0, limit);
  }

  async tailLog(runId: string, maxBytes: number): Promise<{ path: string; text: string; truncated: boolean }> {
    const run = this.runs.get(runId);
    if (!run) throw new InvalidArgumentError(`no run ${runId}`);
    if (!run.logPath) throw new InvalidArgumentError(`run ${runId} has no log yet (status ${run.status})`);
    return Promise.resolve({ path: run.logPath, ...this.runs.tailLog(runId, maxBytes) });
  }

  flush(onProgress: (sent: number, remaining: number) => void): Promise<FlushResult> {
    if (!this.parts.flush) return Promise.resolve({ sent: 0, remaining: 0, error: 'telemetry flush is not available in this process' });
    return this.parts.flush(onProgress);
  }

  setSchedulePaused(paused: boolean, fetcher?: string): ScheduleStatus {
    if (!this.parts.setSchedulePaused) throw new InvalidArgumentError('the schedule runs only in the agent');
    return this.parts.setSchedulePaused(paused, fetcher);
  }

  listEvents(params: ListEvents.Params, abort: (stop: () => void) => void): Promise<ListEvents.Result> {
    if (!this.parts.listEvents) throw new InvalidArgumentError('operator events are kept only by the agent');
    return this.parts.listEvents(params, abort);
  }

  metrics(): Promise<GetMetrics.Result> {
    if (!this.parts.metrics) throw new InvalidArgumentError('metrics are not available in this process');
    return this.parts.metrics();
  }

  poolStates(): PoolState[] {
    const active = this.runs.activeRuns();
    const locks = readKernelFlocks();
    return [...this.pools.values()].map((pool) => this.poolState(pool, locks, active));
  }

  private poolState(pool: PoolBackend, locks: Map<string, KernelLock>, active: RunInfo[]): PoolState {
    const slots = pool.state((runId) => this.runs.isOwnRun(runId), locks);
    return {
      name: pool.name,
      size: pool.size,
      used: slots.filter((s) => s.holder !== null).length,
      waiting: active.filter((r) => r.pool === pool.name && r.status === 'waiting').length,
      waitTimeoutSeconds: pool.waitTimeoutSeconds,
      slots,
      memory: this.memory.poolMemory(pool.name), // memory ceilings
    };
  }

  agentInfo(): AgentInfo {
    const otherMode = otherModeHolders({ usePools: this.config.usePools, lockDir: this.config.lockDir, poolNames: Object.keys(this.config.pools) }, readKernelFlocks(), this.store.active());
    return {
      pid: process.pid,
      host: os.hostname(),
      startedAt: this.startedAt,
      protocolVersion: PROTOCOL_VERSION,
      mode: this.config.usePools ? 'pools' : 'serial',
      dataDir: this.config.dataDir,
      lockDir: this.config.lockDir,
      memory: this.memory.enforcement(), // memory ceilings
      ...(this.slotBackend ? { slotBackend: this.slotBackend.status() } : {}),
      ...(otherMode ? { otherMode } : {}),
    };
  }

  async close(stopFetchers = false, cancelWaiting = false): Promise<void> {
    this.foreign.close();
    await this.runs.shutdown(stopFetchers, cancelWaiting);
    await this.github.close();
    this.retention?.close();
    this.cancelPoolPublish();
    for (const pool of this.pools.values()) pool.close();
    await this.remoteCancel?.close();
    await this.slotBackend?.close();
    this.memory.close(); // memory ceilings
    await this.spawner.close?.();
  }

  /** The core's part of a snapshot; the disk gate, the spool and the schedule add theirs. */
  coreState(): Omit<SnapshotParts, 'disk' | 'spool' | 'schedule'> {
    const active = this.runs.activeRuns().map((r) => this.withUsage(r));
    const ids = new Set(active.map((r) => r.runId));
    return {
      agent: this.agentInfo(),
      catalog: this.catalog.entries.map((e) => ({ name: e.name, kind: e.kind ?? 'fetcher', pool: this.config.usePools ? e.pool : SERIAL_POOL, aliases: e.aliases ?? [], demo: e.demo })),
      pools: this.poolStates(),
      runs: [...active, ...this.store.recent(SNAPSHOT_RECENT_RUNS).filter((r) => !ids.has(r.runId)).map(toRunInfo)],
      sync: this.github.info(),
    };
  }

  // memory ceilings
  /** Each pool's memory ceiling; the serial mode's one pool gets heavy-io's (its fetchers run there). */
  private poolCeilings(): Map<string, number> {
    if (!this.config.usePools) return new Map([[SERIAL_POOL, this.config.pools['heavy-io'].memoryMb]]);
    return new Map(Object.entries(this.config.pools).map(([name, pool]) => [name, pool.memoryMb]));
  }

  /** A running run with its memory and CPU as of now (memory ceilings). */
  private withUsage(run: RunInfo): RunInfo {
    if (run.status !== 'running') return run;
    const usage = this.memory.usage(run.runId);
    return usage ? { ...run, ...usage } : run;
  }

  /** Marks a pool changed; every pool changed meanwhile is published together (see PublishThrottle). */
  private publishPool(name: string): void {
    // A pool's state reads the kernel's lock table and every lock file: only worth it for a listener.
    if (this.poolsClosed || !this.hub.hasListeners()) return;
    this.dirtyPools.add(name);
    this.poolPublish.changed();
  }

  /** One read of the kernel's lock table and of the active runs for every pool changed since the last; returns its cost in ms. */
  private publishDirtyPools(): number {
    const names = [...this.dirtyPools];
    this.dirtyPools.clear();
    if (this.poolsClosed || !this.hub.hasListeners()) return 0;
    const began = performance.now();
    const locks = readKernelFlocks();
    const active = this.runs.activeRuns();
    for (const name of names) {
      const pool = this.pools.get(name);
      if (pool) this.hub.publish({ kind: 'pool', pool: this.poolState(pool, locks, active) });
    }
    return performance.now() - began;
  }

  private cancelPoolPublish(): void {
    this.poolsClosed = true;
    this.poolPublish.cancel();
    this.dirtyPools.clear();
  }

  /** Connects the shared slot database and seeds core.pool; a pooler URL is a ConfigError. */
  async openSlots(): Promise<void> {
    await this.slotBackend?.open();
  }

  /** The agent acts on cancels other stations ask of it (after adopting, so its runs are known). */
  async listenForCancels(): Promise<void> {
    await this.remoteCancel?.listen({
      cancel: (runId, by) => this.runs.cancel(runId, by),
      waitRun: (runId) => this.runs.waitRun(runId),
      get: (runId) => this.runs.get(runId),
    });
  }

  private defaultSizes(): Map<string, number> {
    if (!this.config.usePools) return new Map([[SERIAL_POOL, 1]]);
    return new Map(Object.entries(this.config.pools).map(([name, pool]) => [name, pool.slots]));
  }

  private createPools(policy: StationPolicy): void {
    if (this.slotBackend) {
      const backend = this.slotBackend;
      for (const [name, size] of this.defaultSizes()) {
        const waitTimeoutSeconds = this.config.pools[name as keyof Config['pools']]?.waitTimeoutSeconds ?? this.config.pools['heavy-io'].waitTimeoutSeconds;
        this.pools.set(name, new PgSlotPool({ name, defaultSize: size, waitTimeoutSeconds, backend, keeperPath: distFile('pgSlotKeeper.js'), logger: this.logger, onLost: () => this.publishPool(name) }));
      }
      return;
    }
    // A stopped holder is signalled only if this station's run store started exactly that process.
    const isRecordedRun = (pid: number, startTime: number) => this.store.hasRunningProcess(pid, startTime);
    const onReclaim = (event: ReclaimEvent) => {
      this.parts.telemetry.emit({
        runId: event.record.runId ?? `reclaim-${event.pool}-${event.index}-${Date.now()}`,
        event: 'reclaimed',
        task: event.record.fetcher ?? 'unknown',
        pool: event.pool,
        payload: { slot: event.index, lockPath: event.lockPath, pid: event.record.pid, killedGroup: event.killedGroup, reason: 'holder-stopped' },
      });
      // memory ceilings: the run's cgroup also holds what left its process group.
      if (event.record.runId) this.memory.signal(event.record.runId, 'SIGKILL');
      this.publishPool(event.pool);
    };
    if (!this.config.usePools) {
      // Serial compatibility: the legacy global lock, shared with a cron_fetch.sh in serial mode.
      this.pools.set(SERIAL_POOL, new SlotPool({
        name: SERIAL_POOL,
        dir: this.config.lockDir,
        size: 1,
        waitTimeoutSeconds: this.config.pools['heavy-io'].waitTimeoutSeconds,
        fileName: () => SERIAL_LOCK_FILE,
        policy,
        isRecordedRun,
        logger: this.logger,
        onReclaim,
      }));
      return;
    }
    for (const [name, pool] of Object.entries(this.config.pools)) {
      this.pools.set(name, new SlotPool({
        name,
        dir: path.join(this.config.lockDir, name),
        size: pool.slots,
        waitTimeoutSeconds: pool.waitTimeoutSeconds,
        policy,
        isRecordedRun,
        logger: this.logger,
        onReclaim,
      }));
    }
  }
}
