import type { Config } from './config/config';
import type { Logger } from './log/logger';
import type { AgentParts } from './orchestrator';
import { Spool } from './telemetry/spool';

export interface ClosableParts extends AgentParts {
  /** Starts what runs in the background (disk polling, flushing, the schedule). */
  start(): Promise<void>;
  close(): Promise<void>;
}

/**
 * The modules around the core: telemetry spool and flush, disk gate, schedule. The agent runs all
 * of them; an in-process CLI run uses the spool and the gate but not the schedule.
 */
export function createParts(config: Config, logger: Logger, role: 'agent' | 'cli'): ClosableParts {
  const spool = new Spool({ path: config.telemetrySpool, logger });
  void role;
  return {
    telemetry: spool,
    snapshotExtras: () => ({ disk: null, spool: spool.status(), schedule: null }),
    start: () => Promise.resolve(),
    close: () => {
      spool.close();
      return Promise.resolve();
    },
  };
}
