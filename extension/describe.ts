import type { RunInfo, WaitReason } from '../shared/protocol';

/** Why a run waits, in words: "position 2 in the pool", "disk 8.1 GB free, waits for 35 GB", … */
export function describeWait(wait: WaitReason | null): string {
  if (!wait) return 'waiting';
  switch (wait.kind) {
    case 'pool':
      return `position ${wait.position} in the pool`;
    case 'disk':
      return wait.freeGb === null
        ? `disk ${wait.state}: free space unknown, waits for ${wait.resumeGb} GB`
        : `disk ${wait.state}: ${gb(wait.freeGb)} free, waits until ${wait.resumeGb} GB`;
    case 'admission':
      return `disk: ${gb(wait.freeGb)} free, ${gb(wait.reservedGb)} reserved by running fetchers, pauses at ${wait.pauseGb} GB`;
    case 'hibernating':
      return `hibernating until ${new Date(wait.until).toLocaleTimeString()}`;
    case 'retry':
      return `try ${wait.attempt} at ${new Date(wait.until).toLocaleTimeString()}`;
    case 'slot-backend':
      return wait.cause === 'connection-cap' ? 'slot database at its connection cap' : 'slot database unreachable';
  }
}

/** "42 s", "3 min", "2 h 5 min" since an ISO time. */
export function elapsed(since: string, now = Date.now()): string {
  const seconds = Math.max(0, Math.round((now - Date.parse(since)) / 1000));
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min`;
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

export function gb(value: number): string {
  return `${value.toFixed(1)} GB`;
}

/** "completed 5 min ago (exit 0)", for the Run fetcher quick pick. */
export function describeResult(run: RunInfo): string {
  const when = run.finishedAt ? `${elapsed(run.finishedAt)} ago` : '';
  const how = run.exitCode !== null ? `exit ${run.exitCode}` : run.signal ?? run.reason ?? '';
  return [run.status, when, how ? `(${how})` : ''].filter((p) => p !== '').join(' ');
}
