// The words an operator reads for the protocol's tokens: one table, used by the VS Code extension and
// by the CLI's human output (`--json` keeps the tokens). Pure: no `vscode`, no Node-only module.

import type { RunInfo, RunReason, RunTrigger, WaitReason } from './protocol';

/** Every run reason token, in words (the token stays in tooltips and `--json` for scripts). */
export const REASON_WORDS: Readonly<Record<RunReason, string>> = {
  'wait-timeout': 'waited too long for a slot',
  'disk-backpressure-timeout': 'waited too long for free disk space',
  'admission-impossible': 'needs more disk space than the disk can give',
  'no-such-pool': 'its pool is not configured',
  'lock-file-unsafe': 'its slot lock file is not safe to use',
  'lock-dir-unsafe': 'the lock folder is not safe to use',
  'lock-group-unknown': 'the lock sharing group does not exist',
  'slot-error': 'its slot could not be taken',
  'start-error': 'the program could not start',
  'exit-code': 'the program exited with an error',
  signal: 'the program was killed by a signal',
  'exit-status-unknown': 'how the program ended is unknown',
  'memory-limit': 'stopped at its memory ceiling',
  cancelled: 'cancelled by the operator',
  'agent-stopping': 'the agent stopped',
  'owner-exited-while-waiting': 'the agent that queued it ended while it waited',
  'already-active': 'a run of it was already active',
  starting: 'starting',
  lingering: 'its processes still hold the slot',
  hibernating: 'waiting for GitHub’s rate limit',
  'repos-not-reached': 'some repositories were not reached',
  'repos-file-invalid': 'the repositories file is invalid',
  'github-sync-unavailable': 'the GitHub sync is not available here',
  'storage-error': 'the database refused to store the data',
  'stuck-no-progress': 'the sync made no progress',
  'unknown-sync': 'the sync to resume was not found',
  'no-repositories': 'there are no repositories to sync',
  'sync-completed': 'the sync completed',
  'sync-failed': 'the sync failed',
  'sync-cancelled': 'the sync was cancelled',
  'slot-backend-unavailable': 'the slot database is unreachable',
  'slot-session-lost': 'its slot’s database session was lost',
  'retry-backoff': 'waiting to try again',
  timeout: 'ran past its time limit',
  stalled: 'stalled: its log stopped growing',
  unauthorized: 'GitHub refused the token',
};

/** What a waiting run waits for, by the wait's kind. */
export const WAIT_KIND_WORDS: Readonly<Record<WaitReason['kind'], string>> = {
  pool: 'waiting for a slot',
  disk: 'waiting for free disk space',
  admission: 'waiting for disk space to be free of reservations',
  hibernating: 'hibernating until GitHub’s rate limit resets',
  retry: 'waiting to try again',
  'slot-backend': 'waiting for the slot database',
  storage: 'waiting for its storage to come back',
};

/** Who started a run. `protocol` is what VS Code sends (the CLI sends `cli`). */
export const TRIGGER_WORDS: Readonly<Record<RunTrigger, string>> = {
  cli: 'CLI',
  protocol: 'VS Code',
  schedule: 'schedule',
  'catch-up': 'catch-up',
  adopted: 'adopted from an earlier agent',
};

/** A reason in words; an unknown token (a newer agent) is shown as it is. */
export function reasonWords(reason: string | null | undefined): string {
  if (!reason) return '';
  return (REASON_WORDS as Record<string, string>)[reason] ?? reason;
}

export function triggerWords(trigger: string): string {
  return (TRIGGER_WORDS as Record<string, string>)[trigger] ?? trigger;
}

/** "1 run", "2 runs"; `many` for irregular plurals. */
export function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** A length of time in words: "1 second", "45 seconds", "3 min", "6 h", "2 h 5 min", "2 days". */
export function durationWords(totalSeconds: number): string {
  const s = Math.max(0, Math.round(totalSeconds));
  if (s < 60) return plural(s, 'second');
  const minutes = Math.floor(s / 60);
  if (minutes < 60) return `${minutes} min`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return minutes % 60 === 0 ? `${hours} h` : `${hours} h ${minutes % 60} min`;
  return plural(Math.round(hours / 24), 'day');
}

/**
 * Gigabytes, the one unit for the disk figures an operator compares: two significant decimals
 * below 1 GB (so 0.06 free and a 0.1 threshold do not both read "0.1 GB"), one below 10, whole above.
 */
export function gbWords(gb: number): string {
  // Something, however little, never reads "0 GB" (a fetcher's 4 MB peak).
  if (gb > 0 && gb < 0.01) return 'under 0.01 GB';
  const text = gb < 1 ? String(Number(gb.toFixed(2))) : gb < 10 ? gb.toFixed(1) : Math.round(gb).toString();
  return `${text} GB`;
}

/** "14:05" in the reader's zone (a time of today; the date is in tooltips). */
export function clockTime(iso: string): string {
  return new Date(iso).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
}

/** Why a run waits, in words: "waiting for a slot (position 2)", "attempt 2 of 3 · retry at 14:05", … */
export function waitWords(wait: WaitReason | null, run?: Pick<RunInfo, 'attempt' | 'attempts'>): string {
  if (!wait) return 'waiting';
  switch (wait.kind) {
    case 'pool':
      return `waiting for a slot (position ${wait.position})`;
    case 'disk':
      return wait.freeGb === null
        ? `waiting for free disk space: needs ${gbWords(wait.resumeGb)} free, free space unknown`
        : `waiting for free disk space: needs ${gbWords(wait.resumeGb)} free, ${gbWords(wait.freeGb)} now`;
    case 'admission':
      return `waiting for disk space: ${gbWords(wait.freeGb)} free, ${gbWords(wait.reservedGb)} reserved by running fetchers, pauses below ${gbWords(wait.pauseGb)}`;
    case 'hibernating':
      return `hibernating until ${clockTime(wait.until)}`;
    case 'retry': {
      const of = run?.attempts !== undefined ? ` of ${run.attempts}` : '';
      return `attempt ${wait.attempt}${of} · retry at ${clockTime(wait.until)}`;
    }
    case 'slot-backend':
      return wait.cause === 'connection-cap'
        ? 'waiting for the slot database (at its connection cap)'
        : 'waiting for the slot database (unreachable)';
    case 'storage':
      return `waiting for its storage (${wait.cause === 'disk-full' ? 'disk full' : 'unreachable'}) since ${clockTime(wait.since)}; resumes from its checkpoints`;
  }
}

/**
 * How a finished run ended, without repeating its status: "exit 3 · the program exited with an
 * error" says less than "exit 3"; "ran past its time limit at 14:05" says when.
 */
export function endWords(run: Pick<RunInfo, 'status' | 'exitCode' | 'signal' | 'reason' | 'finishedAt' | 'attempt' | 'attempts'>): string {
  const how = run.exitCode !== null ? `exit ${run.exitCode}` : (run.signal ?? '');
  // A reason that only repeats the status or the exit code adds nothing.
  const repeats =
    run.reason === null || run.reason === run.status || run.reason === 'exit-code' || (run.reason === 'signal' && run.signal !== null);
  let reason = repeats ? '' : reasonWords(run.reason);
  if ((run.reason === 'timeout' || run.reason === 'stalled') && run.finishedAt) reason += ` at ${clockTime(run.finishedAt)}`;
  const attempts = run.attempts !== undefined && run.attempts > 1 ? `attempt ${run.attempt ?? run.attempts} of ${run.attempts}` : '';
  return [how, reason, attempts].filter((p) => p !== '').join(' · ');
}
