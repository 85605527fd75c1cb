import { durationWords, gbWords, waitWords } from '../shared/humanWords';
import type { RunInfo, WaitReason } from '../shared/protocol';

/** Why a run waits, in words (shared with the CLI): "waiting for a slot (position 2)", "attempt 2 of 3 · retry at 14:05", … */
export function describeWait(wait: WaitReason | null, run?: Pick<RunInfo, 'attempt' | 'attempts'>): string {
  return waitWords(wait, run);
}

/** "42 seconds", "3 min", "2 h 5 min" since an ISO time. */
export function elapsed(since: string, now = Date.now()): string {
  return durationWords((now - Date.parse(since)) / 1000);
}

export function gb(value: number): string {
  return gbWords(value);
}

/** "completed 5 min ago (exit 0)", for the Run fetcher quick pick. */
export function describeResult(run: RunInfo): string {
  const when = run.finishedAt ? `${elapsed(run.finishedAt)} ago` : '';
  const how = run.exitCode !== null ? `exit ${run.exitCode}` : (run.signal ?? run.reason ?? '');
  return [run.status, when, how ? `(${how})` : ''].filter((p) => p !== '').join(' ');
}
