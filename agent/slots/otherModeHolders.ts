import * as fs from 'node:fs';
import * as path from 'node:path';
import { SERIAL_POOL, type OtherModeHolders } from '../../shared/protocol';
import { SERIAL_LOCK_FILE } from '../checkStationDirs';
import { kernelLockOf, type KernelLock } from '../flock/procLocks';

const SLOT_FILE = /^slot_\d+\.lock$/;

/**
 * Holders of the mode this process is not in: the serial lock held while it thinks pools, or pool
 * slot files held while it thinks serial (a cron job, a detached run or an agent started with the
 * other `CRON_USE_POOLS`), from the kernel's lock table and the run store's active runs. Only
 * `lstat` and `readdir`: nothing in the lock folder is opened or trusted, this is a report.
 */
export function otherModeHolders(
  opts: { usePools: boolean; lockDir: string; poolNames: string[] },
  locks: Map<string, KernelLock>,
  activeRuns: { runId: string; pool: string }[],
): OtherModeHolders | null {
  const files = opts.usePools
    ? [path.join(opts.lockDir, SERIAL_LOCK_FILE)]
    : opts.poolNames.flatMap((pool) => slotFiles(path.join(opts.lockDir, pool)));
  const lockFiles = files.filter((file) => kernelLockOf(locks, regularStat(file)) !== null);
  const runs = activeRuns.filter((r) => (opts.usePools ? r.pool === SERIAL_POOL : r.pool !== SERIAL_POOL)).map((r) => r.runId);
  if (lockFiles.length === 0 && runs.length === 0) return null;
  return { mode: opts.usePools ? 'serial' : 'pools', lockFiles, runs };
}

function slotFiles(dir: string): string[] {
  try {
    return fs
      .readdirSync(dir)
      .filter((name) => SLOT_FILE.test(name))
      .map((name) => path.join(dir, name));
  } catch {
    return [];
  }
}

function regularStat(file: string): fs.Stats | null {
  try {
    const st = fs.lstatSync(file);
    return st.isFile() ? st : null;
  } catch {
    return null;
  }
}
