import { GroupCommit } from '../../agent/telemetry/groupCommit';

/** A group commit whose write records each batch it is given, in order; `timing` as GroupCommit's. */
export function recordingGroupCommit<T>(timing?: { windowMs: number; burstGapMs: number }): { group: GroupCommit<T>; writes: T[][] } {
  const writes: T[][] = [];
  const group = new GroupCommit<T>((items) => {
    writes.push(items);
  }, timing);
  return { group, writes };
}
