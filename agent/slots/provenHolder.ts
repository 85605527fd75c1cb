import * as fs from 'node:fs';
import type { OwnerRecord } from './ownerRecord';
import { processUid, readProcInfo, type ProcInfo } from '../../shared/node/procInfo';

/** Tells whether a pid with its start time is a run this station's run store has started. */
export type RecordedRun = (pid: number, startTime: number) => boolean;

/**
 * Why the process a lock record names is not provably one of our runs, as a token; null when it is.
 * A record is text anyone with the file could have written, and /proc/<pid>/stat is world-readable,
 * so a matching start time proves nothing by itself. A holder is ours only when it is our uid, our
 * run store started exactly that pid at that start time, it leads its own group (our runs do) which
 * is not our own group or session, and it really has the lock file open.
 */
export function whyNotOurRun(record: OwnerRecord, lockFile: { dev: number; ino: number }, isRecordedRun: RecordedRun): string | null {
  if (!Number.isInteger(record.pid) || record.pid <= 1) return 'pid-out-of-range';
  const info = readProcInfo(record.pid);
  if (!info || info.state === 'Z' || info.startTime !== record.startTime) return 'process-gone';
  if (info.pgid !== info.pid || info.pgid <= 1) return 'not-group-leader';
  const self = readProcInfo(process.pid);
  if (!self || info.pgid === self.pgid || info.session === self.session) return 'own-group-or-session';
  if (processUid(info.pid) !== (process.getuid?.() ?? 0)) return 'foreign-uid';
  if (!isRecordedRun(info.pid, info.startTime)) return 'not-a-recorded-run';
  if (!holdsFile(info, lockFile)) return 'lock-not-held-by-process';
  return null;
}

/**
 * Signals the group of a proven run, checking the proof again immediately before the signal (Node
 * has no pidfd_send_signal): the group leader is alive with its start time, so its group id cannot
 * have been reused. Returns the token that stopped it, or null when the signal was sent.
 */
export function signalProvenGroup(
  record: OwnerRecord,
  lockFile: { dev: number; ino: number },
  isRecordedRun: RecordedRun,
  signal: NodeJS.Signals,
): string | null {
  const why = whyNotOurRun(record, lockFile, isRecordedRun);
  if (why) return why;
  try {
    process.kill(-record.pid, signal);
  } catch {
    return 'signal-failed';
  }
  return null;
}

function holdsFile(info: ProcInfo, file: { dev: number; ino: number }): boolean {
  let fds: string[];
  try {
    fds = fs.readdirSync(`/proc/${info.pid}/fd`);
  } catch {
    return false;
  }
  for (const fd of fds) {
    try {
      const st = fs.statSync(`/proc/${info.pid}/fd/${fd}`);
      if (st.dev === file.dev && st.ino === file.ino) return true;
    } catch {
      // Closed while we looked.
    }
  }
  return false;
}
