import type { RunInfo } from '../../shared/protocol';
import type { Config } from '../config/config';
import { ClientError, UnknownRunError } from '../errors';
import { ExitCode } from '../exitCodes';
import type { Logger } from '../log/logger';
import { toRunInfo } from '../runs/runStore';
import { ErrorCodes } from '../../shared/protocol';
import type { AgentLink } from './agentLink';
import { openAgent } from '../openAgent';
import { ownerOf, signalOwner } from './runOwner';

const TERMINAL = new Set(['completed', 'failed', 'cancelled', 'skipped']);
const POLL_MS = 250;

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

  const foreignActive = (runId: string) => {
    if (orchestrator.runs.isOwnRun(runId)) return null;
    const stored = orchestrator.store.get(runId);
    return stored && !TERMINAL.has(stored.status) ? stored : null;
  };

  const cancelForeign = async (runId: string): Promise<RunInfo> => {
    const stored = foreignActive(runId);
    if (stored === null) throw new UnknownRunError(runId);
    if (ownerOf(stored) === 'gone') {
      await orchestrator.runs.adoptLeftovers();
      if (orchestrator.runs.isOwnRun(runId)) return orchestrator.runs.cancel(runId);
    }
    if (!signalOwner(stored)) {
      throw new ClientError(ErrorCodes.unavailable, ExitCode.agentUnavailable, `run ${runId} is managed by the agent (pid ${stored.ownerPid}), which does not answer; try again when it does`);
    }
    return toRunInfo(stored);
  };

  const waitForeign = async (runId: string): Promise<RunInfo> => {
    for (;;) {
      const stored = orchestrator.store.get(runId);
      if (stored === null) throw new UnknownRunError(runId);
      if (TERMINAL.has(stored.status)) return toRunInfo(stored);
      if (ownerOf(stored) === 'gone') {
        await orchestrator.runs.adoptLeftovers();
        if (orchestrator.runs.isOwnRun(runId)) return orchestrator.waitRun(runId);
      }
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  };

  return {
    remote: false,
    run: (fetcher, args) => orchestrator.run(fetcher, args, 'cli'),
    waitRun: (runId) => (foreignActive(runId) ? waitForeign(runId) : orchestrator.waitRun(runId)),
    cancel: async (target) => {
      if (target.runId !== undefined && foreignActive(target.runId)) return [await cancelForeign(target.runId)];
      const mine = await orchestrator.cancel(target);
      if (target.fetcher === undefined) return mine;
      const name = orchestrator.catalog.resolve(target.fetcher).name;
      const others = orchestrator.store.active().filter((r) => r.fetcher === name && foreignActive(r.runId));
      return [...mine, ...await Promise.all(others.map((r) => cancelForeign(r.runId)))];
    },
    snapshot: () => Promise.resolve(orchestrator.hub.snapshot()),
    listRuns: (limit) => Promise.resolve(orchestrator.listRuns(limit)),
    flush: (onProgress) => orchestrator.flush(onProgress),
    setSchedulePaused: (paused, fetcher) => Promise.resolve(orchestrator.setSchedulePaused(paused, fetcher)),
    listEvents: () => Promise.reject(new ClientError(ErrorCodes.unavailable, ExitCode.agentUnavailable, 'no agent is running: operator events are kept by the running agent only (start it with `quantilica agent`)')),
    metrics: () => orchestrator.metrics(),
    close: () => agent.close(false),
  };
}
