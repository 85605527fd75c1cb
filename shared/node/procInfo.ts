import * as fs from 'node:fs';

/** What /proc says about a process: enough to tell a live holder from a stopped one or a reused PID. */
export interface ProcInfo {
  pid: number;
  /** R, S, D, T, t, Z, … (proc(5)). */
  state: string;
  ppid: number;
  pgid: number;
  session: number;
  /** Start time in clock ticks after boot: with the PID, it names a process uniquely. */
  startTime: number;
}

/** Reads /proc/<pid>/stat; null when there is no such process. */
export function readProcInfo(pid: number): ProcInfo | null {
  let text: string;
  try {
    text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // The command name (field 2) is in parentheses and may itself contain spaces and parentheses.
  const close = text.lastIndexOf(')');
  const fields = text.slice(close + 2).split(' ');
  return {
    pid,
    state: fields[0] ?? '?',
    ppid: Number(fields[1]),
    pgid: Number(fields[2]),
    session: Number(fields[3]),
    startTime: Number(fields[19]),
  };
}

/** The real uid of a process (/proc/<pid>/status), or null when it is gone. */
export function processUid(pid: number): number | null {
  try {
    const m = /^Uid:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

/** True when the process is stopped (job control or tracing): state T or t. */
export function isStopped(info: ProcInfo): boolean {
  return info.state === 'T' || info.state === 't';
}

/** Direct children of a process (needs CONFIG_PROC_CHILDREN; an empty list otherwise). */
export function childrenOf(pid: number): number[] {
  try {
    return fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}
