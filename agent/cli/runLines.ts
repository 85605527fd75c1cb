import { isFinalStatus, type RunInfo } from '../../shared/protocol';
import type { Logger } from '../log/logger';
import type { StateHub } from '../state/stateHub';
import { waitText } from './format';
import { humanDuration } from './timeText';

/** Runs remembered to tell a new state from a repeated one; the oldest are forgotten past this. */
const REMEMBERED = 2000;

/**
 * The agent's own account of its runs: one log line each time a run's state changes (started,
 * waiting for something, a new try, lingering, ended), read from the run changes the agent
 * publishes. A state is its status, reason, wait kind and try, so a new status, reason or wait a
 * lifecycle move brings prints without code here. An ordinary place in a slot's queue and the
 * instant between a spawn and its confirmation print nothing: a run's usual life is two lines.
 */
export function logRunLines(hub: StateHub, logger: Logger): () => void {
  const printed = new Map<string, string>();
  // An observer: run changes are published whoever listens; pools' pictures are not built for it.
  return hub.observe(({ change }) => {
    if (change.kind !== 'run') return;
    const run = change.run;
    if (quiet(run)) return;
    const key = `${run.status}|${run.reason ?? ''}|${run.wait?.kind ?? ''}|${run.attempt ?? 1}`;
    if (printed.get(run.runId) === key) return;
    printed.delete(run.runId);
    printed.set(run.runId, key);
    if (printed.size > REMEMBERED) printed.delete(printed.keys().next().value as string);
    const fields = { event: 'run', runId: run.runId, fetcher: run.fetcher, reason: run.reason };
    if (run.status === 'failed') logger.warn(fields, runLine(run));
    else logger.info(fields, runLine(run));
  });
}

function quiet(run: RunInfo): boolean {
  return run.reason === 'starting' || (run.status === 'waiting' && (run.wait === null || run.wait.kind === 'pool') && run.reason === null);
}

/** `run mx53… comex started in heavy-io slot 0 (schedule)`, `run mx53… comex failed (exit-code), exit 3, after 2 s`. */
export function runLine(run: RunInfo, now = Date.now()): string {
  const head = `run ${run.runId} ${run.fetcher}`;
  const reason = run.reason && run.reason !== run.status ? ` (${run.reason})` : '';
  const attempt = run.attempts !== undefined && run.attempts > 1 ? `, try ${run.attempt ?? 1} of ${run.attempts}` : '';
  if (run.status === 'running' && run.reason === null) {
    return `${head} started in ${run.pool}${run.slot === null ? '' : ` slot ${run.slot}`} (${run.trigger})${attempt}`;
  }
  if (isFinalStatus(run.status)) {
    const exit = run.exitCode !== null ? `, exit ${run.exitCode}` : run.signal ? `, ${run.signal}` : '';
    const took = run.startedAt
      ? `, after ${humanDuration((run.finishedAt ? Date.parse(run.finishedAt) : now) - Date.parse(run.startedAt))}`
      : '';
    return `${head} ${run.status}${reason}${exit}${took}`;
  }
  const wait = waitText(run);
  return `${head} ${run.status}${reason}${wait ? `: ${wait}` : ''}${attempt}`;
}
