import type { Config } from '../config/config';
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
    run: (fetcher, args) => orchestrator.run(fetcher, args, 'cli'),
    waitRun: (runId) => orchestrator.waitRun(runId),
    cancel: (target) => orchestrator.cancel(target),
    snapshot: () => Promise.resolve(orchestrator.hub.snapshot()),
    listRuns: (limit) => Promise.resolve(orchestrator.listRuns(limit)),
    flush: (onProgress) => orchestrator.flush(onProgress),
    setSchedulePaused: (paused, fetcher) => Promise.resolve(orchestrator.setSchedulePaused(paused, fetcher)),
    close: () => agent.close(false),
  };
}
