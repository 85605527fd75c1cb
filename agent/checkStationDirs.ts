import * as fs from 'node:fs';
import * as path from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Config } from './config/config';
import { EnvironmentError } from './errors';
import { ensureLogDir, logDirSetting } from './runs/runLogFile';
import { statusDirOf } from './runs/statusDir';
import type { Logger } from './log/logger';
import { tightenedMessage, VerifiedDir } from './station/openInVerifiedDir';
import { HOME_WHY, verifyHome } from './station/checkSettingPaths';
import { privatePolicy, stationPolicy, type StationPolicy } from './station/stationPolicy';
import { UnsafeStationError } from './station/unsafeStationError';
import { ensureVerifiedDir } from './station/verifiedDir';

/** The legacy global lock of the serial mode, in the lock dir itself. */
export const SERIAL_LOCK_FILE = 'quantilica_cron_heavy.lock';
const SLOT_FILE = /^slot_(0|[1-9]\d{0,2})\.lock$/;

/**
 * Proves the station is safe and usable before anything runs: the lock folder and each pool folder
 * pass the shared-folder check (made 0700, or 2770 for a lock group), the slot files already there
 * pass the file check, and each folder takes a write. An unsafe station stops with a message saying
 * what is wrong, why and how to fix it; an unusable folder with the setting named. Returns the policy
 * the pools use.
 */
export function checkStationDirs(config: Config, logger?: Logger): StationPolicy {
  const policy = stationPolicy(config.lockGroup);
  const lockDirs = config.usePools ? Object.keys(config.pools).map((p) => path.join(config.lockDir, p)) : [];
  withSetting('QUANTILICA_LOCK_DIR', config.lockDir, () => {
    for (const dir of [config.lockDir, ...lockDirs]) {
      ensureVerifiedDir(dir, policy, 'QUANTILICA_LOCK_DIR');
      const verified = VerifiedDir.open(dir, policy, (file, mode) =>
        logger?.warn({ file, mode: mode.toString(8) }, tightenedMessage(file, mode)),
      );
      if (!verified) throw Object.assign(new Error('removed while checked'), { code: 'ENOENT' });
      try {
        // Every slot file already there must pass the file check now, not fail a run later.
        for (const name of verified.names()) {
          if (name !== SERIAL_LOCK_FILE && !SLOT_FILE.test(name)) continue;
          const opened = verified.openFile(name, { create: false, write: false });
          if (opened) fs.closeSync(opened.fd);
        }
        verified.probeWrite();
      } finally {
        verified.close();
      }
    }
  });
  withSetting('DATA_DIR', config.dataDir, () => {
    try {
      fs.mkdirSync(config.dataDir, { recursive: true, mode: 0o755 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') throw Object.assign(new Error('not a directory'), { code: 'ENOTDIR' });
      throw err;
    }
    probeWrite(config.dataDir);
  });
  // The home: a folder of ours that nobody else can write, like the log folder; one of ours that is
  // merely too open is closed first (0700), as it always was. Its runs folder holds the exit statuses
  // the agent believes: checked the same way, never tightened (it may already hold planted files).
  withSetting('QUANTILICA_HOME', config.homeDir, () => {
    verifyHome(config.homeDir);
    ensureVerifiedDir(statusDirOf(config.homeDir), privatePolicy(), 'QUANTILICA_HOME', HOME_WHY);
    probeWrite(config.homeDir);
  });
  // Run logs: a folder of ours that nobody else can write, like the lock folder (runLogFile.ts).
  const logSetting = logDirSetting(config.logDir, config.dataDir);
  withSetting(logSetting, config.logDir, () => ensureLogDir(config.logDir, logSetting));
  return policy;
}

function withSetting(setting: string, dir: string, fn: () => void): void {
  try {
    fn();
  } catch (err) {
    if (err instanceof UnsafeStationError) throw err;
    throw new EnvironmentError(`${setting}=${dir} is not a writable directory (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
}

/**
 * access() says yes to root everywhere; only a real write tells a read-only mount. The probe is a
 * name nobody can predict, created exclusively inside the folder (never its parent), so a planted
 * link or a leftover file of another account can neither be written through nor make a start fail.
 */
function probeWrite(dir: string): void {
  const probe = path.join(dir, `.quantilica-probe-${randomBytes(16).toString('hex')}`);
  const { O_CREAT, O_EXCL, O_NOFOLLOW, O_WRONLY } = fs.constants;
  fs.closeSync(fs.openSync(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600));
  fs.unlinkSync(probe);
}
