/**
 * The content of a slot lock file: who holds it. `cat slot_0.lock` shows it, as the seed's runbook
 * expects. It is information, not the lock: the kernel's flock is the truth, and this record is
 * checked against /proc (PID plus start time) before anyone acts on it.
 */
export interface OwnerRecord {
  pid: number;
  /** /proc/<pid>/stat start time in clock ticks; guards against a reused PID. */
  startTime: number;
  fetcher: string | null;
  runId: string | null;
  since: string;
  /** The agent (or CLI) process that took the slot. */
  agentPid: number;
}

export function formatOwnerRecord(record: OwnerRecord): string {
  return `${JSON.stringify(record)}\n`;
}

/** Parses a record; a legacy script may have written a bare PID, which is kept as such. */
export function parseOwnerRecord(text: string): OwnerRecord | null {
  const trimmed = text.trim();
  if (trimmed === '') return null;
  if (/^\d+$/.test(trimmed)) {
    return { pid: Number(trimmed), startTime: NaN, fetcher: null, runId: null, since: '', agentPid: NaN };
  }
  try {
    const value = JSON.parse(trimmed) as Partial<OwnerRecord>;
    if (typeof value.pid !== 'number' || !Number.isInteger(value.pid) || value.pid <= 0) return null;
    return {
      pid: value.pid,
      startTime: typeof value.startTime === 'number' ? value.startTime : NaN,
      fetcher: typeof value.fetcher === 'string' ? value.fetcher : null,
      runId: typeof value.runId === 'string' ? value.runId : null,
      since: typeof value.since === 'string' ? value.since : '',
      agentPid: typeof value.agentPid === 'number' ? value.agentPid : NaN,
    };
  } catch {
    return null;
  }
}
