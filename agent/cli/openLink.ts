import type { Config } from '../config/config';
import type { Logger } from '../log/logger';
import type { AgentLink } from './agentLink';
import { localLink } from './localLink';

/** The running agent when one answers; otherwise this process, with the same slots and state. */
export async function openLink(config: Config, logger: Logger): Promise<AgentLink> {
  return Promise.resolve(localLink(config, logger));
}
