import { checkStationDirs } from '../checkStationDirs';
import type { Config } from '../config/config';
import type { Logger } from '../log/logger';
import { StateHub, type SnapshotParts } from '../state/stateHub';
import { Spool } from '../telemetry/spool';
import { composeCore, type Core } from './composeCore';

export interface OpenedCore extends Core {
  spool: Spool;
  /** Closes the core, then its spool. */
  close(stopFetchers?: boolean, cancelWaiting?: boolean): Promise<void>;
}

/**
 * The core alone, as an in-process CLI run has it, with a real spool and no disk gate, flusher or
 * schedule (its snapshot has the spool beside it): what the agent tests and the benchmarks drive.
 * Nothing is started; `start` adopts what a previous owner left.
 */
export function openCore(config: Config, logger: Logger, spool: { fallbackPath?: string } = {}): OpenedCore {
  const telemetry = new Spool({ path: config.telemetrySpool, logger, ...spool });
  const hub: StateHub = new StateHub((): SnapshotParts => ({
    ...core.control.coreState(),
    disk: null,
    spool: telemetry.status(),
    schedule: null,
  }));
  const core: Core = composeCore(config, logger, { hub, policy: checkStationDirs(config), role: 'cli', telemetry });
  return {
    ...core,
    spool: telemetry,
    close: async (stopFetchers = false, cancelWaiting = false) => {
      await core.close(stopFetchers, cancelWaiting);
      telemetry.close();
    },
  };
}
