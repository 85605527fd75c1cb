import type { RunInfo } from '../../shared/protocol';
import type { Config } from '../config/config';
import type { Logger } from '../log/logger';
import { followRun, type LinkHolder } from './followRun';

/** Waits for a run, following it across the agent going away; Ctrl-C or SIGTERM cancels it. */
export async function waitWithCancelOnSignal(holder: LinkHolder, runId: string, config: Config, logger: Logger): Promise<RunInfo> {
  const onSignal = () => {
    holder.link.cancel({ runId }).catch((err: unknown) => logger.warn({ runId, err: String(err) }, 'cancel failed'));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    return await followRun(holder, runId, config, logger);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
