import * as path from 'node:path';
import { SERIAL_POOL } from '../../shared/protocol';
import { SERIAL_LOCK_FILE } from '../checkStationDirs';
import type { Config } from '../config/config';
import type { Logger } from '../log/logger';
import { distFile } from '../paths';
import { PgRunCancel } from '../slots/pgRunCancel';
import { PgSlotBackend } from '../slots/pgSlotBackend';
import { PgSlotPool } from '../slots/pgSlotPool';
import type { PoolBackend } from '../slots/poolBackend';
import { SlotPool, type ReclaimEvent } from '../slots/slotPool';
import type { StationPolicy } from '../station/stationPolicy';

export interface SlotHooks {
  /** A stopped holder is signalled only if this station's run store started exactly that process. */
  isRecordedRun(pid: number, startTime: number): boolean;
  /** A slot of a stopped holder was taken back (flock pools). */
  onReclaim(event: ReclaimEvent): void;
  /** A pool's slots changed without a run of this process moving (a postgres lock lost), or may have (a slot published as free in its grace). */
  onLost(pool: string): void;
}

export interface Slots {
  pools: Map<string, PoolBackend>;
  /** The shared slot database with QUANTILICA_SLOT_BACKEND=postgres (opened by the core's start). */
  slotBackend: PgSlotBackend | null;
  /** Cancels of runs held or queued on other stations, and of ours asked by them. */
  remoteCancel: PgRunCancel | null;
}

/** The pools and what holds their slots: flock files on this station, or the shared slot database. */
export function composeSlots(config: Config, logger: Logger, policy: StationPolicy, hooks: SlotHooks): Slots {
  const slotBackend =
    config.slots.backend === 'postgres' && config.slots.databaseUrl !== null
      ? new PgSlotBackend({
          url: config.slots.databaseUrl,
          station: config.slots.station,
          defaults: defaultSizes(config),
          logger,
          keeperPath: distFile('pgSlotKeeper.js'),
          keeperDir: path.join(config.homeDir, 'pg-keeper'),
        })
      : null;
  const remoteCancel = slotBackend ? new PgRunCancel(slotBackend, logger) : null;
  const pools = new Map<string, PoolBackend>();
  if (slotBackend) {
    for (const [name, size] of defaultSizes(config)) {
      const waitTimeoutSeconds =
        config.pools[name as keyof Config['pools']]?.waitTimeoutSeconds ?? config.pools['heavy-io'].waitTimeoutSeconds;
      pools.set(
        name,
        new PgSlotPool({
          name,
          defaultSize: size,
          waitTimeoutSeconds,
          backend: slotBackend,
          logger,
          onLost: () => hooks.onLost(name),
        }),
      );
    }
    return { pools, slotBackend, remoteCancel };
  }
  const isRecordedRun = (pid: number, startTime: number) => hooks.isRecordedRun(pid, startTime);
  const onReclaim = (event: ReclaimEvent) => hooks.onReclaim(event);
  if (!config.usePools) {
    // Serial compatibility: the legacy global lock, shared with a cron_fetch.sh in serial mode.
    pools.set(
      SERIAL_POOL,
      new SlotPool({
        name: SERIAL_POOL,
        dir: config.lockDir,
        size: 1,
        waitTimeoutSeconds: config.pools['heavy-io'].waitTimeoutSeconds,
        fileName: () => SERIAL_LOCK_FILE,
        policy,
        isRecordedRun,
        logger,
        onReclaim,
      }),
    );
    return { pools, slotBackend, remoteCancel };
  }
  for (const [name, pool] of Object.entries(config.pools)) {
    pools.set(
      name,
      new SlotPool({
        name,
        dir: path.join(config.lockDir, name),
        size: pool.slots,
        waitTimeoutSeconds: pool.waitTimeoutSeconds,
        policy,
        isRecordedRun,
        logger,
        onReclaim,
        onUnsure: () => hooks.onLost(name),
      }),
    );
  }
  return { pools, slotBackend, remoteCancel };
}

/** Each pool's size before the shared slot database says otherwise; the serial mode's one pool has one slot. */
function defaultSizes(config: Config): Map<string, number> {
  if (!config.usePools) return new Map([[SERIAL_POOL, 1]]);
  return new Map(Object.entries(config.pools).map(([name, pool]) => [name, pool.slots]));
}
