import * as fs from 'node:fs';
import * as path from 'node:path';

const PROCS = '/cgroup.procs';

/**
 * Makes the folders whose cgroup.procs a run's QUANTILICA_CGROUP_PROCS names (joined by ':'), for a
 * spawn that goes to a spawner which joins them without making them (runWrapper.sh), after they were
 * left to the native spawner's waiter (MemoryCeilings' spawnerMakesRunFolders). A folder there already
 * is kept; one that cannot be made is left to the join, which then fails with the folder named on
 * the run's log.
 */
export function makeJoinFolders(procs: string | undefined): void {
  if (procs === undefined || procs === '') return;
  for (const file of procs.split(':')) {
    if (!file.endsWith(PROCS)) continue;
    try {
      fs.mkdirSync(path.dirname(file));
    } catch {
      // EEXIST: the agent's, or an earlier try's; anything else: the join says it.
    }
  }
}
