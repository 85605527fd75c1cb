import * as fs from 'node:fs';
import type { ConnectionInfo } from '../protocol';
import { readProcInfo } from './procInfo';

/** This boot's id (Linux); '' where the kernel does not say. */
export function bootId(): string {
  try {
    return fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return '';
  }
}

export type AgentLiveness = { live: true } | { live: false; reason: string };

/**
 * Whether the process a connection file names is the agent that wrote it: same boot, the pid alive
 * (not a zombie), owned by this user, started at the recorded time. A pid alone proves nothing
 * after a kill -9 or a reboot: any process of anyone may have it since. A file without the
 * identity (an older agent) is not trusted either.
 */
export function checkAgentLiveness(info: ConnectionInfo): AgentLiveness {
  if (info.uid === undefined || info.startTime === undefined || info.bootId === undefined) {
    return { live: false, reason: "the file does not record the agent's uid and start time (written by an older agent)" };
  }
  const uid = process.getuid?.();
  if (uid !== undefined && info.uid !== uid) return { live: false, reason: `the file names uid ${info.uid}, not you (uid ${uid})` };
  const boot = bootId();
  if (boot !== '' && info.bootId !== boot) return { live: false, reason: 'the agent ran before the last reboot' };
  const proc = readProcInfo(info.pid);
  if (proc === null || proc.state === 'Z') return { live: false, reason: `no process ${info.pid} runs` };
  if (proc.startTime !== info.startTime)
    return { live: false, reason: `process ${info.pid} is another process than the agent (started at another time)` };
  let owner: number;
  try {
    owner = fs.statSync(`/proc/${info.pid}`).uid;
  } catch {
    return { live: false, reason: `no process ${info.pid} runs` };
  }
  if (uid !== undefined && owner !== uid) return { live: false, reason: `process ${info.pid} belongs to uid ${owner}` };
  return { live: true };
}
