import type { RunInfo } from '../../shared/protocol';
import type { Config } from '../config/config';
import type { Logger } from '../log/logger';
import { AgentLostError, type AgentLink } from './agentLink';
import { openLink } from './openLink';

/** The link a command uses now; following a run may replace it. */
export interface LinkHolder {
  link: AgentLink;
}

/**
 * Waits for a run to end, across the agent going away: when the connection is lost the run goes on
 * (its fetcher keeps its slot), so the CLI opens a new link, to the next agent or in-process, which
 * adopts the run once its manager is gone, and keeps waiting. The exit code is the fetcher's.
 */
export async function followRun(holder: LinkHolder, runId: string, config: Config, logger: Logger): Promise<RunInfo> {
  for (;;) {
    try {
      return await holder.link.waitRun(runId);
    } catch (err) {
      if (!(err instanceof AgentLostError)) throw err;
      logger.warn({ runId, reason: 'agent-lost' }, `${err.message}; following run ${runId} to its end`);
      await holder.link.close().catch(() => undefined);
      // As long as the agent lives: the run goes on under it, or under the next one.
      holder.link = await openLink(config, logger, Number.POSITIVE_INFINITY);
    }
  }
}
