import * as path from 'node:path';
import { isFinalStatus, SERIAL_POOL, type RunInfo, type ScheduleStatus } from '../../shared/protocol';
import { Catalog } from '../catalog/catalog';
import { demoCatalog } from '../catalog/demoCatalog';
import type { Config } from '../config/config';
import { GithubRuns } from '../github/githubRuns';
import type { Logger } from '../log/logger';
import { MemoryCeilings } from '../memory/memoryCeilings';
import { Orchestrator } from '../orchestrator';
import { distFile } from '../paths';
import { ForeignRuns } from '../runs/foreignRuns';
import { NativeSpawner } from '../runs/nativeSpawner';
import { processSpawner } from '../runs/processSpawner';
import { Retention } from '../runs/retention';
import { RunManager } from '../runs/runManager';
import { systemClock, type RunSpawner } from '../runs/runPorts';
import { RunStore, toRunInfo } from '../runs/runStore';
import { spoolJournal } from '../runs/spoolJournal';
import { openGate, type StartGate } from '../runs/startGate';
import { ThreadSpawner } from '../runs/threadSpawner';
import type { AgentControl, FlushResult } from '../server/agentControl';
import type { PoolBackend } from '../slots/poolBackend';
import type { ReclaimEvent } from '../slots/slotPool';
import { PoolPublisher } from '../state/poolPublisher';
import { PoolStates } from '../state/poolStates';
import { runWithUsage } from '../state/runWithUsage';
import type { StateHub } from '../state/stateHub';
import type { StationPolicy } from '../station/stationPolicy';
import type { Spool } from '../telemetry/spool';
import { readProcInfo } from '../../shared/node/procInfo';
import { composeSlots } from './composeSlots';
import { BurstHeap } from '../memory/burstHeap';
import { loadNativeHeap } from '../memory/nativeHeap';
import { loadNativeMalloc } from '../memory/nativeMalloc';

/** glibc's mmap and trim thresholds for the long-lived agent (agent/native/quantilica-malloc.c). */
const ALLOCATOR_THRESHOLD_BYTES = 1024 * 1024;
/**
 * External memory reported for a moment to have V8 start its own collection after a burst: above its
 * soft limit (64 MB over what it had after its last mark-compact), far below its hard one (half the
 * old generation's limit, where it would collect atomically and the compiled code would go).
 */
const MARKING_PRESSURE_BYTES = 128 * 1024 * 1024;

/** What the core is built on; openAgent makes them first (the optional ones are absent in a core alone). */
export interface CoreInputs {
  /** Made first: everything publishes into it from its first moment, so no change is lost. */
  hub: StateHub;
  /** The station's checked folders (checkStationDirs, called once by whoever builds the inputs). */
  policy: StationPolicy;
  /** The agent adopts GitHub syncs a dead agent left, forks from a spawner and prunes old runs; a CLI does none of these. */
  role: 'agent' | 'cli';
  gate?: StartGate;
  /** The spool: telemetry events, and the run state beside them (one database, one transaction per move). */
  telemetry: Spool;
  flush?: (onProgress: (sent: number, remaining: number) => void) => Promise<FlushResult>;
  setSchedulePaused?: (paused: boolean, fetcher?: string) => ScheduleStatus;
  listEvents?: AgentControl['listEvents'];
  metrics?: AgentControl['metrics'];
}

/** The core's parts the rest of the composition root wires to (the schedule, the events, the metrics). */
export interface CoreParts {
  catalog: Catalog;
  pools: ReadonlyMap<string, PoolBackend>;
  runs: RunManager;
  store: RunStore;
  memory: MemoryCeilings;
  github: GithubRuns;
}

export interface Core {
  control: Orchestrator;
  parts: CoreParts;
  /** Opens the slot database, adopts runs a previous owner left, then (the agent) listens for remote cancels and prunes old runs. */
  start(): Promise<void>;
  /** Closes the parts in the reverse order; running fetchers go on unless `stopFetchers`, waiting runs wait for the next agent unless `cancelWaiting`. */
  close(stopFetchers?: boolean, cancelWaiting?: boolean): Promise<void>;
}

/**
 * The orchestration core: catalog, pools, run store, memory ceilings, spawner, GitHub runs and the
 * run manager, made in dependency order, and the facade over them.
 */
export function composeCore(config: Config, logger: Logger, inputs: CoreInputs): Core {
  const { hub, role } = inputs;
  const catalog = config.catalogPath ? Catalog.load(config.catalogPath) : demoCatalog(config);
  // Made before what it pictures (the pools and runs below): pools change from their first moment.
  const publisher = new PoolPublisher(hub, (names) => poolStates.of(names));
  // The pools' hooks reach the store and the memory ceilings made next: they fire only once runs move.
  const { pools, slotBackend, remoteCancel } = composeSlots(config, logger, inputs.policy, {
    isRecordedRun: (pid, startTime) => store.hasRunningProcess(pid, startTime),
    onReclaim: (event) => onReclaim(event),
    onLost: (pool) => publisher.changed(pool),
  });
  // The run state lives in the spool's database; a state.db of an earlier version is moved in.
  const store = new RunStore(inputs.telemetry, path.join(config.homeDir, 'state.db'), logger, undefined, config.retention.runs);
  // Pools' cgroups made, and those an earlier agent left taken over or removed, before the run
  // manager adopts that agent's runs.
  const memory = new MemoryCeilings({
    pools: poolCeilings(config),
    reserveMb: config.memory.reserveMb,
    cgroupName: config.memory.cgroupName,
    homeDir: config.homeDir,
    logger,
    support: config.memory.enforce ? undefined : { kind: 'not-enforced', reason: 'disabled-by-setting' },
    spawnerMakesRunFolders: () => spawner instanceof NativeSpawner && spawner.makesRunFolders,
  });
  const activeIds = new Set(store.active().map((r) => r.runId));
  memory.adoptLeftovers((runId) => activeIds.has(runId));
  // The agent's fetchers are forked by the small native spawner, else by a worker thread (the hot
  // path); a one-run CLI forks its one fetcher itself.
  const spawner: RunSpawner & { close?(): Promise<void> } =
    role !== 'agent'
      ? processSpawner
      : config.spawner === 'native'
        ? new NativeSpawner(distFile('quantilica-spawner'), new ThreadSpawner(), logger)
        : new ThreadSpawner();
  const github = new GithubRuns({
    config,
    logger,
    pools,
    adopts: role === 'agent',
    onSync: (sync) => hub.publish({ kind: 'sync', sync }),
    runEnded: (runId) => {
      const run = store.get(runId);
      return run !== null && isFinalStatus(run.status);
    },
  });
  // A pool's waiting count moves when a run enters or leaves the queue, not on position updates.
  const lastStatus = new Map<string, RunInfo['status']>();
  // Only the long-lived agent: a CLI's memory ends with it. Two arenas for the threads that first
  // allocate during a burst (libuv's pool, V8's workers) instead of one each.
  const malloc = role === 'agent' ? loadNativeMalloc(distFile('quantilica-malloc.node'), logger) : null;
  malloc?.limitArenas(2);
  // And the allocator's thresholds held at 1 MiB: the free memory an arena keeps after a burst stays
  // under it (RSS 5 s after 1,000 runs ~8 MB lower), with no more brk, madvise or page faults during
  // the burst than glibc's own raised thresholds (128 KiB had 2.3x the brk calls and 28 % more faults).
  malloc?.holdThresholds(ALLOCATOR_THRESHOLD_BYTES);
  // The collection after a burst, made by V8's own marking so that the code it compiled survives it.
  const nativeHeap = role === 'agent' ? loadNativeHeap(distFile('quantilica-heap.node'), logger) : null;
  const heap =
    role === 'agent'
      ? BurstHeap.install(
          logger,
          () => {
            inputs.telemetry.withDatabase((db) => db.pragma('shrink_memory'));
            malloc?.trim();
          },
          nativeHeap === null ? null : () => nativeHeap.reportExternalMemory(MARKING_PRESSURE_BYTES),
        )
      : null;
  const runs = new RunManager({
    config,
    catalog,
    pools,
    poolOf: (entry) => (config.usePools ? entry.pool : SERIAL_POOL),
    gate: inputs.gate ?? openGate,
    journal: spoolJournal(inputs.telemetry, store),
    spawner,
    clock: systemClock,
    self: { pid: process.pid, startTime: readProcInfo(process.pid)?.startTime ?? 0, role },
    runTimeoutOf: (pool) => (config.pools[pool as keyof Config['pools']] ?? config.pools['heavy-io']).runTimeoutSeconds,
    diskMaxWaitSeconds: config.disk.maxWaitSeconds,
    logger,
    wrapperPath: distFile('runWrapper.sh'),
    memory,
    onRunChange: (info) => {
      // The usage is for a client's view (four cgroup files read); the observers (events, metrics) do not read it.
      const run = hub.hasListeners() ? runWithUsage(info, memory) : info;
      hub.publish({ kind: 'run', run });
      if (lastStatus.get(run.runId) !== run.status) {
        lastStatus.set(run.runId, run.status);
        if (isFinalStatus(run.status)) {
          lastStatus.delete(run.runId);
          heap?.runEnded();
        } else heap?.busy();
        publisher.changed(run.pool);
      }
    },
    onPoolChange: (pool) => publisher.changed(pool),
    onIdle: () => heap?.idle(),
    github,
  });
  const poolStates = new PoolStates({ pools, runs, memory });
  const foreign = new ForeignRuns({
    store,
    runs,
    onEnded: (run) => {
      if (!hub.hasListeners()) return;
      hub.publish({ kind: 'run', run: toRunInfo(run) });
      publisher.changed(run.pool);
    },
  });
  const onReclaim = (event: ReclaimEvent) => {
    inputs.telemetry.emit({
      runId: event.record.runId ?? `reclaim-${event.pool}-${event.index}-${Date.now()}`,
      event: 'reclaimed',
      task: event.record.fetcher ?? 'unknown',
      pool: event.pool,
      payload: {
        slot: event.index,
        lockPath: event.lockPath,
        pid: event.record.pid,
        killedGroup: event.killedGroup,
        reason: 'holder-stopped',
      },
    });
    // The run's cgroup also holds what left its process group.
    if (event.record.runId) memory.signal(event.record.runId, 'SIGKILL');
    publisher.changed(event.pool);
  };
  // The agent's periodic pruning of ended runs' logs and status files (applied at start, then hourly).
  const retention =
    role === 'agent'
      ? new Retention({
          logDir: config.logDir,
          statusDir: runs.statusDir(),
          days: config.retention.days,
          runs: config.retention.runs,
          // Runs of any process (an in-process CLI run, a run another agent left) keep their files.
          activeRunIds: () => new Set([...runs.activeIds(), ...store.active().map((r) => r.runId)]),
          runRows: store,
          logger,
        })
      : null;
  const control = new Orchestrator({
    config,
    hub,
    catalog,
    runs,
    foreign,
    store,
    memory,
    github,
    slotBackend,
    remoteCancel,
    poolStates,
    flush: inputs.flush,
    setSchedulePaused: inputs.setSchedulePaused,
    listEvents: inputs.listEvents,
    metrics: inputs.metrics,
  });
  if (catalog.entries.some((e) => e.kind === 'github-sync')) github.start();

  return {
    control,
    parts: { catalog, pools, runs, store, memory, github },
    start: async () => {
      await slotBackend?.open(); // connects the shared slot database and seeds core.pool; a pooler URL is a ConfigError
      await runs.adoptLeftovers();
      if (role === 'agent') {
        // Cancels other stations ask of this one, once adopting has made its runs known.
        await remoteCancel?.listen({
          cancel: (runId, by) => runs.cancel(runId, by),
          waitRun: (runId) => runs.waitRun(runId),
          get: (runId) => runs.get(runId),
        });
        retention?.start();
      }
    },
    close: async (stopFetchers = false, cancelWaiting = false) => {
      foreign.close();
      await runs.shutdown(stopFetchers, cancelWaiting);
      await github.close();
      retention?.close();
      publisher.close();
      heap?.close();
      for (const pool of pools.values()) pool.close();
      await remoteCancel?.close();
      await slotBackend?.close();
      memory.close();
      await spawner.close?.();
    },
  };
}

/** Each pool's memory ceiling; the serial mode's one pool gets heavy-io's (its fetchers run there). */
function poolCeilings(config: Config): Map<string, number> {
  if (!config.usePools) return new Map([[SERIAL_POOL, config.pools['heavy-io'].memoryMb]]);
  return new Map(Object.entries(config.pools).map(([name, pool]) => [name, pool.memoryMb]));
}
