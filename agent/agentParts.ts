import * as path from 'node:path';
import type { Config } from './config/config';
import { DiskGate } from './disk/diskGate';
import { InvalidArgumentError } from './errors';
import type { Logger } from './log/logger';
import type { AgentParts, Orchestrator } from './orchestrator';
import { Schedule } from './schedule/schedule';
import { forwardingHub } from './state/forwardingHub';
import type { ScheduleTarget } from './schedule/scheduleTarget';
import { startDiskSampler } from './history/diskSampler';
import { setHistoryStore } from './history/historyRegistry';
import { HistoryStore } from './history/historyStore';
import { Flusher } from './telemetry/flusher';
import { Spool } from './telemetry/spool';
import { publishSpoolStatus } from './telemetry/spoolStatusPublisher';

export interface ClosableParts extends AgentParts {
  /** Called once by the orchestrator that uses these parts, before `start`. */
  attach(orchestrator: Orchestrator): void;
  /** Starts what runs in the background (disk polling, flushing, the schedule). */
  start(): Promise<void>;
  /** Stops what makes new runs (the schedule), first thing on shutdown. */
  stopIntake(): void;
  close(): Promise<void>;
}

/**
 * The modules around the core: telemetry spool and flush, disk gate, schedule. The agent runs all of
 * them; an in-process CLI run uses the spool and the gate; only the agent starts the schedule.
 */
export function createParts(config: Config, logger: Logger, role: 'agent' | 'cli'): ClosableParts {
  let orchestrator: Orchestrator | null = null;
  // The hub belongs to the orchestrator, made after the parts: changes are held until it exists.
  const hub = forwardingHub();
  const spool = new Spool({ path: config.telemetrySpool, logger });
  const flusher = new Flusher({ spool, databaseUrl: config.databaseUrl, logger });
  let stopSpoolStatus: (() => void) | null = null;
  const gate = new DiskGate({ dataDir: config.dataDir, disk: config.disk, logger, hub });
  let schedule: Schedule | null = null;
  // The Station panel's disk history: kept by the agent only (a CLI run is too short to matter).
  const history = role === 'agent' ? new HistoryStore(path.join(config.homeDir, 'history.db')) : null;
  let stopSampler: (() => void) | null = null;
  return {
    role,
    telemetry: spool,
    gate,
    snapshotExtras: () => ({ disk: gate.status(), spool: spool.status(), schedule: schedule?.status() ?? null }),
    flush: async (onProgress) => {
      const { sent, remaining, error } = await flusher.flushNow(onProgress);
      return { sent, remaining, error };
    },
    setSchedulePaused: (paused, fetcher) => {
      if (!schedule || !orchestrator) throw new InvalidArgumentError('the schedule is not available');
      return schedule.setPaused(paused, fetcher === undefined ? undefined : orchestrator.catalog.resolve(fetcher).name);
    },
    attach(orch) {
      orchestrator = orch;
      hub.attach(orch.hub);
      // The CLI builds the schedule too, to show next due times and to record a pause for the next
      // agent; only the agent starts it.
      schedule = new Schedule({ fetchers: orch.catalog.entries, target: scheduleTarget(orch), logger, homeDir: config.homeDir, catchUp: config.scheduleCatchUp, hub });
    },
    start: async () => {
      stopSpoolStatus = publishSpoolStatus(spool, (status) => hub.publish({ kind: 'spool', spool: status }));
      flusher.start();
      await gate.start();
      if (role === 'agent') schedule?.start();
      if (history) {
        setHistoryStore(history);
        stopSampler = startDiskSampler(history, () => gate.status(), config.disk.pollSeconds);
      }
    },
    stopIntake: () => schedule?.close(),
    close: async () => {
      stopSampler?.();
      if (history) {
        setHistoryStore(null);
        history.close();
      }
      schedule?.close();
      await gate.close();
      stopSpoolStatus?.();
      await flusher.close();
      spool.close();
    },
  };
}

function scheduleTarget(orch: Orchestrator): ScheduleTarget {
  return {
    isActive: (fetcher) => orch.runs.activeRunOf(fetcher) !== null,
    enqueue: (fetcher, trigger) => { orch.run(fetcher, [], trigger).catch(() => { /* refused: the schedule logged its attempt */ }); },
    recordSkipped: (fetcher, reason, trigger, message) => { void orch.runs.recordSkipped(fetcher, reason, trigger, { message }); },
    lastStartedAt: (fetcher) => orch.store.lastStartedAt(fetcher),
  };
}
