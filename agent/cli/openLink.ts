import { connectAgent } from '../client/agentClient';
import type { Config } from '../config/config';
import type { Logger } from '../log/logger';
import { ConnectionFileError, readConnectionFile } from '../server/connectionFile';
import { readProcInfo } from '../slots/procInfo';
import type { AgentLink } from './agentLink';
import { localLink } from './localLink';
import { remoteLink } from './remoteLink';

/** The running agent when one answers; otherwise this process, with the same slots and state files. */
export async function openLink(config: Config, logger: Logger): Promise<AgentLink> {
  return (await openRemoteLink(config)) ?? localLink(config, logger);
}

/**
 * The running agent, or null when none runs (no connection file, or one left by a killed agent).
 * A connection file that is unsafe (wrong mode, a symlink, another owner) is an error, not a reason
 * to fall back: someone may be tampering with it.
 */
export async function openRemoteLink(config: Config): Promise<AgentLink | null> {
  let pid: number;
  try {
    pid = (await readConnectionFile(config.connectionFile)).pid;
  } catch (err) {
    if (err instanceof ConnectionFileError && err.reason === 'missing') return null;
    throw err;
  }
  if (!readProcInfo(pid)) return null;
  return remoteLink(await connectAgent(config.connectionFile, { client: 'quantilica-cli' }));
}
