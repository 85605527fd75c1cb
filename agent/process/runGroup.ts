import * as fs from 'node:fs';
import { readProcInfo } from '../../shared/node/procInfo';

/** The process group of one run: the wrapper is its leader, so the group id is the wrapper's pid. */
export interface RunGroup {
  runId: string;
  /** The wrapper's pid (= the group id) and its /proc start time. */
  pgid: number;
  startTime: number;
}

/**
 * The live (non-zombie) processes of a run's group, or [] when the group is not the run's any more.
 *
 * A group id is a pid: once every process of the group is gone, the kernel may hand the number to a
 * new process that makes its own group. So the group counts as the run's only while it provably is:
 * the wrapper still lives with its recorded start time (a pid cannot be reused as a group id while
 * its group has a member), or a member carries this run's id in its environment (every process the
 * run started inherits `QUANTILICA_RUN_ID`; /proc/<pid>/environ is readable only by the same user).
 */
export function runMembers(group: RunGroup): number[] {
  if (group.pgid <= 1 || group.pgid === process.pid) return [];
  if (!groupHasProcess(group.pgid)) return [];
  const members: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (entry.charCodeAt(0) < 48 || entry.charCodeAt(0) > 57) continue;
    const info = readProcInfo(Number(entry));
    if (info && info.pgid === group.pgid && info.state !== 'Z') members.push(info.pid);
  }
  if (members.length === 0) return [];
  const leader = readProcInfo(group.pgid);
  if (leader && leader.startTime === group.startTime && leader.pgid === group.pgid && leader.state !== 'Z') return members;
  const marker = `QUANTILICA_RUN_ID=${group.runId}`;
  return members.some((pid) => hasEnv(pid, marker)) ? members : [];
}

/**
 * Whether any process is in group `pgid` (a signal 0 to the group; EPERM: one of another user's is).
 * Asked at every run's end, where the usual answer is no: the error that says so is made without the
 * stack trace it would otherwise capture through the agent's whole async chain.
 */
function groupHasProcess(pgid: number): boolean {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  } finally {
    Error.stackTraceLimit = limit;
  }
}

/**
 * Signals the run's whole group, but only after checking, right before the signal, that the group
 * is still the run's (see runMembers). Returns whether a signal was sent.
 */
export function signalRunGroup(group: RunGroup, signal: NodeJS.Signals): boolean {
  if (runMembers(group).length === 0) return false;
  try {
    process.kill(-group.pgid, signal);
    return true;
  } catch {
    // The group ended between the check and the signal.
    return false;
  }
}

/**
 * The group of a run whose spawn was recorded but not its pid (the agent died in between): a live
 * process that carries the run's id in its environment names it. Null when none lives.
 */
export function findRunGroup(runId: string): RunGroup | null {
  const marker = `QUANTILICA_RUN_ID=${runId}`;
  for (const entry of fs.readdirSync('/proc')) {
    if (entry.charCodeAt(0) < 48 || entry.charCodeAt(0) > 57) continue;
    const info = readProcInfo(Number(entry));
    if (info === null || info.state === 'Z' || info.pgid <= 1 || !hasEnv(info.pid, marker)) continue;
    const leader = readProcInfo(info.pgid);
    return { runId, pgid: info.pgid, startTime: leader?.startTime ?? 0 };
  }
  return null;
}

function hasEnv(pid: number, entry: string): boolean {
  let env: Buffer;
  try {
    env = fs.readFileSync(`/proc/${pid}/environ`);
  } catch {
    return false;
  }
  let start = 0;
  for (let i = 0; i <= env.length; i++) {
    if (i === env.length || env[i] === 0) {
      if (i - start === entry.length && env.toString('utf8', start, i) === entry) return true;
      start = i + 1;
    }
  }
  return false;
}
