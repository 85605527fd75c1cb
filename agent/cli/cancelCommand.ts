import type { RunInfo } from '../../shared/protocol';
import type { Config } from '../config/config';
import { ClientError } from '../errors';
import { ExitCode } from '../exitCodes';
import type { Logger } from '../log/logger';
import { followRun, type LinkHolder } from './followRun';

export const RUN_ID = /^[0-9a-z]{6,12}-[0-9a-f]{8}$/;

export interface CancelRequest {
  /** A run id or a fetcher name: a run id is tried first, then the name. */
  target?: string;
  runId?: string;
  fetcher?: string;
  wait: boolean;
}

/**
 * `quantilica cancel`. Outcomes: the runs cancelled (each waited for unless --no-wait), exit 0; a
 * run that has already ended, or a fetcher with no active run: said so, nothing done, exit 0 (the
 * wish "this must not run" holds); an unknown run id or fetcher: exit 65.
 */
export async function cancelCommand(holder: LinkHolder, request: CancelRequest, config: Config, logger: Logger): Promise<number> {
  let runs: RunInfo[];
  if (request.runId !== undefined) {
    runs = await cancelRun(holder, request.runId);
  } else if (request.fetcher !== undefined) {
    runs = await cancelFetcher(holder, request.fetcher);
  } else {
    const target = request.target ?? '';
    if (RUN_ID.test(target)) {
      try {
        runs = await cancelRun(holder, target);
      } catch (err) {
        // Not a run: maybe a fetcher whose name looks like a run id.
        if (!(err instanceof ClientError && err.exitCode === ExitCode.unknownName)) throw err;
        runs = await cancelFetcher(holder, target);
      }
    } else {
      runs = await cancelFetcher(holder, target);
    }
  }
  for (const run of runs) {
    const done =
      request.wait && run.status !== 'completed' && run.status !== 'failed' && run.status !== 'cancelled'
        ? await followRun(holder, run.runId, config, logger)
        : run;
    process.stdout.write(`run ${done.runId} ${done.fetcher} ${done.status}\n`);
  }
  return ExitCode.ok;
}

async function cancelRun(holder: LinkHolder, runId: string): Promise<RunInfo[]> {
  try {
    return await holder.link.cancel({ runId });
  } catch (err) {
    // The agent refuses to cancel a run that is not active: tell which way it ended.
    if (!(err instanceof ClientError && err.exitCode === ExitCode.usage)) throw err;
    const ended = await holder.link.waitRun(runId);
    process.stdout.write(
      `run ${ended.runId} ${ended.fetcher} already ${ended.status}${ended.exitCode !== null ? ` (exit ${ended.exitCode})` : ''}; nothing to cancel\n`,
    );
    return [];
  }
}

async function cancelFetcher(holder: LinkHolder, fetcher: string): Promise<RunInfo[]> {
  const runs = await holder.link.cancel({ fetcher });
  if (runs.length === 0) process.stdout.write(`no active run of ${fetcher}; nothing to cancel\n`);
  return runs;
}
