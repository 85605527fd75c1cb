import { readProcInfo } from '../../shared/node/procInfo';
import { findRunGroup, runMembers, signalRunGroup } from '../process/runGroup';
import { readStatusFile, spawnRun, watchRun } from './runProcess';
import type { RunSpawner } from './runPorts';

/** The real processes: the run wrapper spawned by this process, groups read from /proc. */
export const processSpawner: RunSpawner = {
  spawn: (opts) => Promise.resolve(spawnRun(opts)),
  watch: watchRun,
  signal: signalRunGroup,
  members: runMembers,
  findGroup: findRunGroup,
  ownerAlive: (run) => {
    const info = readProcInfo(run.ownerPid);
    return info !== null && info.startTime === run.ownerStartTime && info.state !== 'Z';
  },
  readStatus: readStatusFile,
};
