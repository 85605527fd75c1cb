import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';

/**
 * The agent's cgroup folder when QUANTILICA_CGROUP_NAME is not set: `quantilica-<uid>-<hash>`, the
 * hash of QUANTILICA_HOME's real path. Run state is per home, and an agent removes the leftover run
 * cgroups no run of its home knows; two homes of one account (a station and a test suite, two agents)
 * sharing one folder per uid removed each other's. Every process of one home (the agent, its CLI
 * runs) gets the same name.
 */
export function defaultCgroupName(homeDir: string): string {
  let real: string;
  try {
    real = fs.realpathSync(homeDir);
  } catch {
    real = path.resolve(homeDir);
  }
  const hash = createHash('sha256').update(real).digest('hex').slice(0, 10);
  return `quantilica-${process.getuid?.() ?? 0}-${hash}`;
}
