import * as fs from 'node:fs';
import * as path from 'node:path';
import { reasonWords, waitWords } from '../../shared/humanWords';
import type { RunInfo, RunReason } from '../../shared/protocol';

/** Where a run's log lives: the fetcher's output, and the lines the agent itself writes there. */
export function runLogPath(logDir: string, fetcher: string, runId: string): string {
  return path.join(logDir, `${fetcher}-${runId}.log`);
}

/**
 * Appends lines the agent writes into a run's log (marked `[quantilica <time>]`, so they never pass
 * for the fetcher's): an operator who opens the log of a run that never started, or of a GitHub sync
 * (which prints nothing of its own), reads why and what happened. Best effort: a log that cannot be
 * written never changes the run's outcome.
 */
export function appendAgentLines(logPath: string, lines: readonly string[], now = new Date()): boolean {
  try {
    fs.mkdirSync(path.dirname(logPath), { recursive: true, mode: 0o700 });
    const fd = fs.openSync(logPath, fs.constants.O_WRONLY | fs.constants.O_APPEND | fs.constants.O_CREAT | fs.constants.O_NOFOLLOW, 0o600);
    try {
      fs.writeSync(fd, lines.map((l) => `[quantilica ${now.toISOString()}] ${l}\n`).join(''));
    } finally {
      fs.closeSync(fd);
    }
    return true;
  } catch {
    return false;
  }
}

/** The log of a run that ended before its fetcher started: why, and what it last waited for. */
export function neverStartedLines(
  run: Pick<RunInfo, 'fetcher' | 'pool' | 'enqueuedAt' | 'wait' | 'attempt' | 'attempts'>,
  status: string,
  reason: RunReason | null,
  message: string | undefined,
): string[] {
  const lines = [
    `${run.fetcher} never started: it ended ${status} while waiting${reason ? `, because ${reasonWords(reason)} (${reason})` : ''}.`,
  ];
  if (message) lines.push(message);
  lines.push(`It was queued at ${run.enqueuedAt} in pool ${run.pool}${run.wait ? `; last it was ${waitWords(run.wait, run)}` : ''}.`);
  return lines;
}
