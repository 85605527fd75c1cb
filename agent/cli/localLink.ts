import type { Config } from '../config/config';
import type { Logger } from '../log/logger';
import { Orchestrator } from '../orchestrator';
import type { AgentLink } from './agentLink';
import { createParts } from '../agentParts';
import { checkStationDirs } from '../checkStationDirs';

/** Runs commands in this process: used when no agent answers. */
export async function localLink(config: Config, logger: Logger): Promise<AgentLink> {
  checkStationDirs(config);
  const parts = createParts(config, logger, 'cli');
  const orchestrator = new Orchestrator(config, logger, parts);
  await orchestrator.runs.adoptLeftovers();
  await parts.start();
  return {
    remote: false,
    run: (fetcher, args) => orchestrator.run(fetcher, args, 'cli'),
    waitRun: (runId) => orchestrator.waitRun(runId),
    cancel: (target) => orchestrator.cancel(target),
    snapshot: () => Promise.resolve(orchestrator.hub.snapshot()),
    listRuns: (limit) => Promise.resolve(orchestrator.listRuns(limit)),
    flush: (onProgress) => orchestrator.flush(onProgress),
    setSchedulePaused: (paused, fetcher) => Promise.resolve(orchestrator.setSchedulePaused(paused, fetcher)),
    close: async () => {
      await orchestrator.close(false);
      await parts.close();
    },
  };
}
