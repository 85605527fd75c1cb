import * as fs from 'node:fs';
import type { StoredRun } from './runStore';
import { readProcInfo } from '../../shared/node/procInfo';

export type OwnerKind = 'gone' | 'self' | 'cli' | 'agent';

/**
 * Who manages a stored run now: this process, another `quantilica` CLI process of this user (an
 * in-process `run`, possibly detached), an agent, or nobody (the owner is gone: the run is adopted
 * by whoever looks next). The owner is identified by pid, start time and uid, never by pid alone.
 */
export function ownerOf(run: StoredRun): OwnerKind {
  if (run.ownerPid === process.pid) return 'self';
  const info = readProcInfo(run.ownerPid);
  if (info === null || info.state === 'Z' || info.startTime !== run.ownerStartTime) return 'gone';
  try {
    if (fs.statSync(`/proc/${run.ownerPid}`).uid !== process.getuid?.()) return 'gone';
    // argv: node, dist/agent.js, <command>, …
    const argv = fs.readFileSync(`/proc/${run.ownerPid}/cmdline`, 'utf8').split('\0');
    return argv[2] === 'agent' ? 'agent' : 'cli';
  } catch {
    return 'gone';
  }
}

/**
 * Asks the CLI process that owns a run to cancel it: SIGTERM, which a waiting `quantilica run`
 * turns into a cancel of its run (TERM, grace, KILL, recorded `cancelled`). Checked right before
 * the signal; false when the owner is not a CLI of this user any more.
 */
export function signalOwner(run: StoredRun): boolean {
  if (ownerOf(run) !== 'cli') return false;
  try {
    process.kill(run.ownerPid, 'SIGTERM');
    return true;
  } catch {
    return false;
  }
}
