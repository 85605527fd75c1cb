import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Config } from './config/config';
import { EnvironmentError } from './errors';

/**
 * Proves the directories the agent writes are usable before anything is created, so a bad lock dir
 * or DATA_DIR fails with a message naming the setting and leaves nothing half-made; then creates them.
 */
export function checkStationDirs(config: Config): void {
  const dirs: Array<[string, string]> = [['QUANTILICA_LOCK_DIR', config.lockDir], ['DATA_DIR', config.dataDir], ['QUANTILICA_HOME', config.homeDir]];
  for (const [setting, dir] of dirs) probeWritable(setting, dir);
  for (const [setting, dir] of dirs) {
    try {
      fs.mkdirSync(dir, { recursive: true });
    } catch (err) {
      throw new EnvironmentError(`${setting}=${dir} cannot be created (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
    }
  }
}

/** The directory, or its nearest existing ancestor when it is still to be made, must take a write. */
function probeWritable(setting: string, dir: string): void {
  let existing = dir;
  while (!fs.existsSync(existing)) existing = path.dirname(existing);
  try {
    if (!fs.statSync(existing).isDirectory()) throw Object.assign(new Error('not a directory'), { code: 'ENOTDIR' });
    // access() says yes to root everywhere; only a real write tells a read-only mount.
    const probe = path.join(existing, `.quantilica-write-test-${process.pid}`);
    fs.writeFileSync(probe, '');
    fs.unlinkSync(probe);
  } catch (err) {
    throw new EnvironmentError(`${setting}=${dir} is not a writable directory (${(err as NodeJS.ErrnoException).code ?? String(err)} at ${existing})`);
  }
}
