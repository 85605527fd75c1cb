import type { RunInfo } from '../../shared/protocol';

/** "14:05" (local time), with seconds when the moment is within ten minutes of now. */
export function clockTime(iso: string, now = Date.now()): string {
  const at = new Date(iso);
  const close = Math.abs(at.getTime() - now) < 10 * 60_000;
  return at.toLocaleTimeString('en-GB', { hour: '2-digit', minute: '2-digit', ...(close ? { second: '2-digit' } : {}), hour12: false });
}

/**
 * What a run's policies say about it, in words: "attempt 2 of 3 · retry at 14:05", "timeout at
 * 14:30", "timed out at 14:30", "stalled since 14:02 (no log output since 13:57)". Empty when
 * the run has no retries, deadline or stall to speak of.
 */
export function runPolicyText(r: RunInfo, now = Date.now()): string {
  const parts: string[] = [];
  const attempts = r.attempts ?? 1;
  if (r.wait?.kind === 'retry')
    parts.push(
      `attempt ${r.wait.attempt} of ${attempts} · retry at ${clockTime(r.wait.until, now)}${r.exitCode !== null ? ` (try ${r.wait.attempt - 1} exited ${r.exitCode})` : ''}`,
    );
  else if (attempts > 1 && r.status === 'running') parts.push(`attempt ${r.attempt ?? 1} of ${attempts}`);
  else if (attempts > 1 && r.status !== 'waiting' && (r.attempt ?? 1) > 1) parts.push(`after ${r.attempt ?? 1} of ${attempts} attempts`);
  if (r.reason === 'timeout')
    parts.push(`${r.status === 'running' ? 'stopping: ' : ''}timed out at ${r.deadline ? clockTime(r.deadline, now) : '?'}`);
  else if (r.status === 'running' && r.deadline) parts.push(`timeout at ${clockTime(r.deadline, now)}`);
  const silentSince = r.logGrewAt ? ` (no log output since ${clockTime(r.logGrewAt, now)})` : '';
  if (r.reason === 'stalled') parts.push(`${r.status === 'running' ? 'stopping: ' : 'cancelled: '}stalled${silentSince}`);
  else if (r.status === 'running' && r.stalledSince) parts.push(`stalled since ${clockTime(r.stalledSince, now)}${silentSince}`);
  return parts.join(' · ');
}
