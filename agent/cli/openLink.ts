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

/** The running agent when one answers; otherwise this process, with the same slots and state files. */
export async function openLink(config: Config, logger: Logger): Promise<AgentLink> {
  return (await openRemoteLink(config, logger)) ?? localLink(config, logger);
}

/**
 * The running agent, or null when none runs: no connection file, or a stale one (the process it
 * names is not the agent that wrote it: killed, rebooted, pid reused), or a live agent that has
 * already closed its port. A connection file that is unsafe (wrong mode, a symlink, another owner)
 * is an error, not a reason to fall back: someone may be tampering with it. An agent that answers
 * and refuses, or something on the port that cannot prove it is the agent, is exit 69.
 */
export async function openRemoteLink(config: Config, logger?: Logger): Promise<AgentLink | null> {
  let info: ConnectionInfo;
  try {
    info = await readLiveConnectionFile(config.connectionFile);
  } catch (err) {
    if (err instanceof ConnectionFileError && err.reason === 'missing') return null;
    if (err instanceof ConnectionFileError && err.reason === 'stale') {
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
      logger?.info({ connectionFile: config.connectionFile, reason: 'agent-not-listening' }, `${err.message}; working in-process`);
      return null;
    }
    throw new ClientError(ErrorCodes.unavailable, ExitCode.agentUnavailable, err.message);
  }
}
