import type { Config } from '../config/config';
import { ClientError } from '../errors';
import { ExitCode } from '../exitCodes';
import { ErrorCodes } from '../../shared/protocol';
import type { Logger } from '../log/logger';
import type { AgentLink } from './agentLink';
import { openAgent } from '../openAgent';

/**
 * Runs commands in this process: used when no agent answers. Runs managed by another CLI process
 * (a cron `quantilica run` waiting on its fetcher) are visible through the shared state: they are
 * cancelled by asking their owner, and waited for by reading the state until they end (adopting
 * them if their owner dies meanwhile).
 */
export async function localLink(config: Config, logger: Logger): Promise<AgentLink> {
  const agent = openAgent(config, logger, { role: 'cli' });
  const orchestrator = agent.control;
  await agent.start();

  return {
    remote: false,
    run: async (fetcher, args) => {
      // Without an agent nobody would keep this run waiting for the slot database past this command:
      // a CLI run (cron's) says so at once rather than wait with nothing to show.
      const unreachable = orchestrator.slotDatabaseError();
      if (unreachable !== null) {
        throw new ClientError(
          ErrorCodes.unavailable,
          ExitCode.agentUnavailable,
          `the slot database (QUANTILICA_SLOT_DATABASE_URL) cannot be reached: ${unreachable}; no run was queued (an agent keeps runs waiting for it)`,
        );
      }
      return orchestrator.run(fetcher, args, 'cli');
    },
    waitRun: (runId) => orchestrator.waitRun(runId),
    cancel: (target) => orchestrator.cancel(target),
    snapshot: () => Promise.resolve(orchestrator.hub.snapshot()),
    listRuns: (limit) => Promise.resolve(orchestrator.listRuns(limit)),
    flush: (onProgress) => orchestrator.flush(onProgress),
    setSchedulePaused: (paused, fetcher) => Promise.resolve(orchestrator.setSchedulePaused(paused, fetcher)),
    listEvents: () =>
      Promise.reject(
        new ClientError(
          ErrorCodes.unavailable,
          ExitCode.agentUnavailable,
          'no agent is running: operator events are kept by the running agent only (start it with `quantilica agent`)',
        ),
      ),
    metrics: () => orchestrator.metrics(),
    close: () => agent.close(false),
  };
}
