import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Config } from '../config/config';
import { EnvironmentError } from '../errors';
import { privatePolicy } from './stationPolicy';
import { UnsafeStationError } from './unsafeStationError';
import { ensureVerifiedDir } from './verifiedDir';

const PROC_SUPER_MAGIC = 0x9fa0;
const SYSFS_MAGIC = 0x62656572;

/**
 * Refuses, before anything is opened or created, a setting whose path cannot be a directory of ours:
 * a file or a device on the way (`QUANTILICA_HOME=/etc/passwd`, `QUANTILICA_LOG_DIR=/dev/null/x`) or
 * a kernel filesystem (`DATA_DIR=/proc/1`). Each message names the setting; exit 73.
 */
export function checkSettingPaths(config: Config): void {
  const paths: Array<[string, string]> = [
    ['QUANTILICA_HOME', config.homeDir],
    ['DATA_DIR', config.dataDir],
    ['QUANTILICA_LOCK_DIR', config.lockDir],
    ['QUANTILICA_LOG_DIR', config.logDir],
    ['QUANTILICA_TELEMETRY_SPOOL', path.dirname(config.telemetrySpool)],
    ['QUANTILICA_CONNECTION_FILE', path.dirname(config.connectionFile)],
  ];
  for (const [setting, dir] of paths) checkDirPath(setting, dir);
}

function checkDirPath(setting: string, dir: string): void {
  let existing = dir;
  let stat: fs.Stats | null = null;
  for (;;) {
    try {
      stat = fs.statSync(existing);
      break;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOTDIR')
        throw new EnvironmentError(`${setting}=${dir} is not a writable directory (ENOTDIR: a part of the path is a file)`);
      if (code !== 'ENOENT') throw new EnvironmentError(`${setting}=${dir}: cannot inspect ${existing} (${code ?? String(err)})`);
      const parent = path.dirname(existing);
      if (parent === existing) break;
      existing = parent;
    }
  }
  if (stat !== null && !stat.isDirectory()) {
    throw new EnvironmentError(`${setting}=${dir} is not a writable directory (ENOTDIR: ${existing} is not a directory)`);
  }
  try {
    const type = fs.statfsSync(existing).type;
    if (type === PROC_SUPER_MAGIC || type === SYSFS_MAGIC) {
      throw new EnvironmentError(
        `${setting}=${dir}: ${existing} is on a kernel filesystem (/proc or /sys), where no files can be stored; choose a directory on a disk`,
      );
    }
  } catch (err) {
    if (err instanceof EnvironmentError) throw err;
  }
}

/** Why a QUANTILICA_HOME (or its runs folder) that is not ours alone is refused (the message of UnsafeStationError). */
export const HOME_WHY =
  "another account could read the agent's token and state, or plant links and files where the agent records how each run ended";

/**
 * QUANTILICA_HOME holds the token, the state, the spool and the exit statuses the agent believes: only
 * its owner may enter it (0700). A home of ours that is too open is closed; one another account owns
 * or can write, or that lies where another account could replace it, is refused (UnsafeStationError,
 * exit 73). Any other failure (a read-only disk, a missing permission) is left to the first write,
 * which names the setting (checkStationDirs).
 */
export function secureHome(homeDir: string): void {
  try {
    verifyHome(homeDir);
  } catch (err) {
    if (err instanceof UnsafeStationError) throw err;
  }
}

/** secureHome, throwing every failure: made if missing, closed if ours, else checked like the log folder. */
export function verifyHome(homeDir: string): void {
  let stat: fs.Stats | undefined;
  try {
    stat = fs.lstatSync(homeDir, { throwIfNoEntry: false });
  } catch {
    // Unreadable: the check below says why.
  }
  if (stat?.isDirectory() && stat.uid === process.getuid?.() && (stat.mode & 0o077) !== 0) fs.chmodSync(homeDir, 0o700);
  ensureVerifiedDir(homeDir, privatePolicy(), 'QUANTILICA_HOME', HOME_WHY);
}
