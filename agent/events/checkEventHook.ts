import * as fs from 'node:fs';
import { ConfigError } from '../config/configError';

/**
 * Refuses at start a QUANTILICA_ON_EVENT that could never run: the agent would otherwise learn it at
 * the first failure, in the middle of the night, and the operator would hear nothing.
 */
export function checkEventHook(program: string | null): void {
  if (program === null) return;
  let stat: fs.Stats;
  try {
    stat = fs.statSync(program);
  } catch (err) {
    throw new ConfigError([
      `QUANTILICA_ON_EVENT=${JSON.stringify(program)}: cannot be used (${(err as NodeJS.ErrnoException).code ?? String(err)}); allowed: an absolute path to an executable file`,
    ]);
  }
  if (!stat.isFile())
    throw new ConfigError([
      `QUANTILICA_ON_EVENT=${JSON.stringify(program)}: not a regular file; allowed: an absolute path to an executable file`,
    ]);
  try {
    fs.accessSync(program, fs.constants.X_OK);
  } catch {
    throw new ConfigError([
      `QUANTILICA_ON_EVENT=${JSON.stringify(program)}: not executable by this user (chmod +x); allowed: an absolute path to an executable file`,
    ]);
  }
}
