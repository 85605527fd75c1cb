import { AgentClient } from '../client/agentClient';
import { AgentSocketError } from '../../shared/node/agentSocket';
import type { Config } from '../config/config';
import { ClientError } from '../errors';
import { ExitCode } from '../exitCodes';
import type { Logger } from '../log/logger';
import { ConnectionFileError, readLiveConnectionFile } from '../../shared/node/connectionFile';
import { ErrorCodes, type ConnectionInfo } from '../../shared/protocol';
import type { AgentLink } from './agentLink';
import { localLink } from './localLink';
import { remoteLink } from './remoteLink';
import { instanceLockHolder } from '../station/instanceLock';
import * as path from 'node:path';

/** How long a command waits for a live agent that does not answer (starting, stopping, overloaded). */
const LIVE_AGENT_PATIENCE_MS = 10_000;

/**
 * The running agent when one answers; otherwise, when no agent lives, this process, with the same
 * slots and state files. `patienceMs`: how long to keep trying an agent that is alive (it holds the
 * instance lock) but does not answer; Infinity to wait as long as it lives (following a run).
 */
export async function openLink(config: Config, logger: Logger, patienceMs = LIVE_AGENT_PATIENCE_MS): Promise<AgentLink> {
  return (await openLiveAgentLink(config, logger, patienceMs)) ?? localLink(config, logger);
}

/**
 * The running agent, or null when provably none lives (nobody holds its instance lock). An agent that
 * is alive but does not answer is tried again until `patienceMs` has passed, then exit 69: working
 * in-process beside a live agent would run fetchers outside its queue and count.
 */
export async function openLiveAgentLink(config: Config, logger: Logger, patienceMs = LIVE_AGENT_PATIENCE_MS): Promise<AgentLink | null> {
  const began = Date.now();
  for (let attempt = 0; ; attempt++) {
    let why = 'no answer';
    const remote = await openRemoteLink(config, attempt === 0 ? logger : undefined, (reason) => {
      why = reason;
    });
    if (remote) return remote;
    const holder = instanceLockHolder(config.homeDir);
    if (holder === null) return null;
    const waited = Date.now() - began;
    if (waited >= patienceMs) {
      throw new ClientError(
        ErrorCodes.unavailable,
        ExitCode.agentUnavailable,
        `the agent is running (pid ${holder} holds ${path.join(config.homeDir, 'agent.flock')}) but did not answer within ${Math.round(waited / 1000)} s (${why}); nothing was done in-process beside it. Try again; if it persists, see the agent's log`,
      );
    }
    if (attempt === 0)
      logger.info(
        { pid: holder, reason: 'agent-not-answering' },
        `the agent (pid ${holder}) is alive but does not answer (${why}); trying again`,
      );
    await new Promise((resolve) => setTimeout(resolve, Math.min(1000, 100 * 2 ** attempt, Math.max(0, patienceMs - waited))));
  }
}

/**
 * The running agent, or null when none runs: no connection file, or a stale one (the process it
 * names is not the agent that wrote it: killed, rebooted, pid reused), or a live agent that has
 * already closed its port. A connection file that is unsafe (wrong mode, a symlink, another owner)
 * is an error, not a reason to fall back: someone may be tampering with it. An agent that answers
 * and refuses, or something on the port that cannot prove it is the agent, is exit 69.
 */
export async function openRemoteLink(config: Config, logger?: Logger, onNone?: (reason: string) => void): Promise<AgentLink | null> {
  let info: ConnectionInfo;
  try {
    info = await readLiveConnectionFile(config.connectionFile);
  } catch (err) {
    if (err instanceof ConnectionFileError && err.reason === 'missing') {
      onNone?.('no connection file yet');
      return null;
    }
    if (err instanceof ConnectionFileError && err.reason === 'stale') {
      onNone?.(err.message);
      if (instanceLockHolder(config.homeDir) === null)
        logger?.info({ connectionFile: config.connectionFile, reason: 'stale-connection-file' }, `${err.message}; working in-process`);
      return null;
    }
    throw err;
  }
  try {
    return remoteLink(await AgentClient.open(info, { client: 'quantilica-cli' }));
  } catch (err) {
    if (!(err instanceof AgentSocketError)) throw err;
    // The agent is alive but nothing listens: it is stopping (it closes the port first).
    if (err.reason === 'unreachable') {
      onNone?.(err.message);
      if (instanceLockHolder(config.homeDir) === null)
        logger?.info({ connectionFile: config.connectionFile, reason: 'agent-not-listening' }, `${err.message}; working in-process`);
      return null;
    }
    throw new ClientError(ErrorCodes.unavailable, ExitCode.agentUnavailable, err.message);
  }
}
