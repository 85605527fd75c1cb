import * as path from 'node:path';

/**
 * The folder where each run's waiter writes the exit status the agent then believes (`<runId>.exit`):
 * made and checked with the home at start (checkStationDirs), read by the runs and by retention.
 */
export function statusDirOf(homeDir: string): string {
  return path.join(homeDir, 'runs');
}
