import * as path from 'node:path';
import { checkStationDirs } from './checkStationDirs';
import { takeInstanceLock } from './station/instanceLock';
import type { Config } from './config/config';
import { DiskGate } from './disk/diskGate';
import { startDiskSampler } from './history/diskSampler';
import { setHistoryStore } from './history/historyRegistry';
import { HistoryStore } from './history/historyStore';
import type { Logger } from './log/logger';
import type { Orchestrator } from './orchestrator';
import type { Catalog } from './catalog/catalog';
import { composeCore, type Core, type CoreParts } from './compose/composeCore';
import { Schedule } from './schedule/schedule';
import type { ScheduleTarget } from './schedule/scheduleTarget';
import { StateHub, type SnapshotParts } from './state/stateHub';
import { Flusher } from './telemetry/flusher';
import {
  isFinalStatus,
  SERIAL_POOL,
  type DiskStatus,
  type OperatorEvent,
  type RunInfo,
  type ScheduleStatus,
  type SpoolStatus,
} from '../shared/protocol';
import { cliVersion } from './cliVersion';
import { EventHook } from './events/eventHook';
import { EventRing } from './events/eventRing';
import { OperatorEvents } from './events/operatorEvents';
import { AgentMetrics, type MetricsSources } from './metrics/agentMetrics';
import { Spool } from './telemetry/spool';
import { publishSpoolStatus } from './telemetry/spoolStatusPublisher';

export interface OpenAgentOptions {
  /**
   * `agent`: the long-lived agent (single-instance lock, retention, schedule, disk history).
   * `cli`: a CLI command working in-process when no agent answers (the same slots, state and spool;
   * the schedule is built to show and record pauses, never started).
   */
  role: 'agent' | 'cli';
}

export interface OpenedAgent {
  /** What the protocol server and the in-process CLI drive. */
  control: Orchestrator;
  /** The fetchers and syncs this station knows (the agent's ready line and summary name them). */
  catalog: Catalog;
  /** `GET /metrics`'s answer: the exposition as ready bytes (metricsServer.ts). */
  metricsBody(): Promise<{ contentType: string; body: Buffer }>;
  /** Adopts runs a previous owner left, then starts what runs in the background. */
  start(): Promise<void>;
  /** Stops what makes new runs (the schedule): first thing on shutdown. */
  stopIntake(): void;
  /** Closes everything in the reverse order; running fetchers go on unless `stopFetchers`, waiting runs wait for the next agent unless `cancelWaiting`. */
  close(stopFetchers?: boolean, cancelWaiting?: boolean): Promise<void>;
}

/**
 * The one composition root. Builds the parts in dependency order (state hub, spool and flusher, disk
 * gate, the core of pools and runs (agent/compose/), schedule), each handed what it needs when it is
 * made; the station's folders are checked once, before anything is opened in them.
 */
export function openAgent(config: Config, logger: Logger, { role }: OpenAgentOptions): OpenedAgent {
  const policy = checkStationDirs(config, logger);
  let release: (() => void) | null = null;
  if (role === 'agent') {
    release = takeInstanceLock(config.homeDir);
  }
  try {
    return build(config, logger, role, policy, release);
  } catch (err) {
    release?.();
    throw err;
  }
}

function build(
  config: Config,
  logger: Logger,
  role: OpenAgentOptions['role'],
  policy: ReturnType<typeof checkStationDirs>,
  release: (() => void) | null,
): OpenedAgent {
  // 1. The state hub. Its snapshot reads the parts made below; nobody asks for one before
  //    openAgent has returned, and every change a part publishes meanwhile reaches the hub.
  const hub: StateHub = new StateHub((): SnapshotParts => ({
    ...control.coreState(),
    disk: gate.status(),
    spool: spool.status(),
    schedule: schedule.status(),
  }));
  // 2. The telemetry spool and its flusher.
  const spool = new Spool({ path: config.telemetrySpool, logger });
  const flusher = new Flusher({ spool, databaseUrl: config.databaseUrl, logger });
  // 3. The disk gate in front of every start.
  const gate = new DiskGate({ dataDir: config.dataDir, disk: config.disk, logger, hub });
  // 4. Pools, runs and their store, and the facade over them.
  const core: Core = composeCore(config, logger, {
    hub,
    policy,
    role,
    gate,
    telemetry: spool,
    flush: async (onProgress) => {
      const { sent, remaining, error } = await flusher.flushNow(onProgress);
      return { sent, remaining, error };
    },
    setSchedulePaused: (paused, fetcher) =>
      schedule.setPaused(paused, fetcher === undefined ? undefined : core.parts.catalog.resolve(fetcher).name),
    listEvents:
      role === 'agent' ? (params, abort) => ring.wait(params.after, params.limit ?? DEFAULT_EVENTS, params.waitMs ?? 0, abort) : undefined,
    metrics: async () => ({ contentType: metrics.contentType, text: await metrics.text() }),
  });
  const { control, parts } = core;
  // 5. The schedule. A CLI builds it too, to show next due times and to record a pause for the next
  //    agent; only the agent starts it.
  const successes = new LastSuccessMemo((fetcher) => parts.store.lastSucceededAt(fetcher));
  const schedule: Schedule = new Schedule({
    fetchers: parts.catalog.entries,
    target: scheduleTarget(control, parts, successes),
    logger,
    homeDir: config.homeDir,
    catchUp: config.scheduleCatchUp,
    hub,
  });
  // 6. Operator events (the hook, `quantilica events`) and the metrics, from what the hub publishes.
  const ring = new EventRing();
  const hook = role === 'agent' && config.onEvent !== null ? new EventHook({ program: config.onEvent, logger }) : null;
  const metrics = new AgentMetrics(
    metricsSources(
      control,
      parts,
      () => gate.status(),
      () => spool.status(),
      () => schedule.status(),
    ),
  );
  const stopObserving = observeOperatorEvents(
    hub,
    new OperatorEvents({ poolOf: (f) => poolOf(config, parts, f), lastOutcomes: parts.store.lastOutcomes() }),
    (event) => {
      ring.push(event);
      hook?.send(event);
      logger.info(
        { event: 'operator-event', operatorEvent: event.event, runId: event.runId, fetcher: event.fetcher, reason: event.reason },
        `event ${event.event}${event.fetcher ? ` ${event.fetcher}` : ''}${event.runId ? ` run ${event.runId}` : ''}${event.reason ? ` (${event.reason})` : ''}`,
      );
    },
    (run) => {
      metrics.observe(run);
      if (isFinalStatus(run.status)) successes.forget(run.fetcher);
      // A run's end can clear (or, failing past a deadline, keep) its entry's lateness: the schedule
      // re-reads it on the next turn, outside the hub's delivery of this change.
      if (isFinalStatus(run.status)) setImmediate(() => schedule.refresh());
    },
    (status) => metrics.observeSchedule(status),
  );
  // The Station panel's disk history: kept by the agent only (a CLI run is too short to matter).
  const history = role === 'agent' ? new HistoryStore(path.join(config.homeDir, 'history.db')) : null;
  // The agent says at once what its memory ceilings can enforce (and why not, when they cannot).
  if (role === 'agent') parts.memory.logEnforcement(logger);

  let stopSpoolStatus: (() => void) | null = null;
  let stopSampler: (() => void) | null = null;
  return {
    control,
    catalog: parts.catalog,
    metricsBody: async () => ({ contentType: metrics.contentType, body: await metrics.body() }),
    start: async () => {
      await core.start(); // slot database, adoption, remote cancels, retention
      stopSpoolStatus = publishSpoolStatus(spool, (status) => hub.publish({ kind: 'spool', spool: status }));
      flusher.start();
      await gate.start();
      if (role === 'agent') schedule.start();
      if (history) {
        setHistoryStore(history);
        stopSampler = startDiskSampler(history, () => gate.status(), config.disk.pollSeconds);
      }
    },
    stopIntake: () => schedule.close(),
    close: async (stopFetchers = false, cancelWaiting = false) => {
      stopObserving();
      hook?.close();
      stopSampler?.();
      if (history) {
        setHistoryStore(null);
        history.close();
      }
      schedule.close();
      await core.close(stopFetchers, cancelWaiting);
      await gate.close();
      stopSpoolStatus?.();
      await flusher.close();
      spool.close();
      release?.();
    },
  };
}

function scheduleTarget(control: Orchestrator, { runs, store }: CoreParts, successes: LastSuccessMemo): ScheduleTarget {
  return {
    isActive: (fetcher) => runs.activeRunOf(fetcher) !== null,
    enqueue: (fetcher, trigger) => {
      control.run(fetcher, [], trigger).catch(() => {
        /* refused: the schedule logged its attempt */
      });
    },
    recordSkipped: (fetcher, reason, trigger, message) => {
      void runs.recordSkipped(fetcher, reason, trigger, { message });
    },
    lastStartedAt: (fetcher) => store.lastStartedAt(fetcher),
    lastSucceededAt: (fetcher) => successes.get(fetcher),
    firstRecordedAt: (fetcher) => store.firstRecordedAt(fetcher),
  };
}

/**
 * Each fetcher's last success, read from the run store at most every few seconds: the schedule's
 * status (every snapshot, every scrape) asks it for every entry. A run of this agent that ends
 * forgets its fetcher's at once; one another process records is seen within the period.
 */
class LastSuccessMemo {
  private readonly known = new Map<string, { at: number; value: Date | null }>();
  constructor(
    private readonly read: (fetcher: string) => Date | null,
    private readonly periodMs = 10_000,
  ) {}
  get(fetcher: string): Date | null {
    const hit = this.known.get(fetcher);
    if (hit !== undefined && Date.now() - hit.at < this.periodMs) return hit.value;
    const value = this.read(fetcher);
    this.known.set(fetcher, { at: Date.now(), value });
    return value;
  }
  forget(fetcher: string): void {
    this.known.delete(fetcher);
  }
}

/** Events `quantilica events` lists without --limit. */
const DEFAULT_EVENTS = 100;

function poolOf(config: Config, { catalog }: CoreParts, fetcher: string): string | null {
  try {
    const entry = catalog.resolve(fetcher);
    return config.usePools ? entry.pool : SERIAL_POOL;
  } catch {
    return null;
  }
}

/** Feeds every published change to the derivation, and each run to `onRun`; returns the unsubscribe. */
function observeOperatorEvents(
  hub: StateHub,
  events: OperatorEvents,
  onEvent: (event: OperatorEvent) => void,
  onRun: (run: RunInfo) => void,
  onSchedule: (schedule: ScheduleStatus) => void,
): () => void {
  return hub.observe(({ change }) => {
    for (const event of events.derive(change)) onEvent(event);
    if (change.kind === 'run') onRun(change.run);
    else if (change.kind === 'schedule') onSchedule(change.schedule);
  });
}

function metricsSources(
  control: Orchestrator,
  { runs, github, store }: CoreParts,
  disk: () => DiskStatus | null,
  spool: () => SpoolStatus | null,
  schedule: () => ScheduleStatus,
): MetricsSources {
  return {
    version: cliVersion(),
    pools: () => control.poolStates(),
    activeRuns: () => runs.activeRuns(),
    schedule,
    disk,
    spool,
    sync: () => github.info(),
    githubTotals: () => github.totals(),
    finished: () => store.endedTotals(),
  };
}
