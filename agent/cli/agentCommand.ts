import type { Config } from '../config/config';
import { ExitCode } from '../exitCodes';
import { createLogger } from '../log/logger';
import { openAgent } from '../openAgent';
import { startAgentServer } from '../server/startAgentServer';
import { capStderrLog } from '../log/stderrLogCap';
import { startSummary } from './startSummary';
import { checkEventHook } from '../events/checkEventHook';
import { startMetricsServer } from '../metrics/metricsServer';

/**
 * The foreground agent. It holds the single-instance lock, adopts runs a previous agent left, serves
 * the protocol, and on SIGTERM/SIGINT stops taking runs while running fetchers go on (they keep their
 * slots and the next agent adopts them) unless told to stop them.
 */
export async function agentCommand(config: Config, stopFetchersFlag: boolean): Promise<number> {
  const logger = createLogger('quantilica-agent', config.logLevel ?? 'info', config.logFormat === 'human' ? 'human' : 'json');
  checkEventHook(config.onEvent);
  const stopLogCap = capStderrLog(config.agentLogCapBytes);
  const agent = openAgent(config, logger, { role: 'agent' });
  const { control } = agent;
  await agent.start();
  const server = await startAgentServer(control, { port: config.port, connectionFile: config.connectionFile, logger });
  const metricsServer = config.metricsListen === null ? null : await startMetricsServer(config.metricsListen, () => control.metrics(), logger);
  // Listen for the stop signals before saying ready: a signal sent on the ready line must stop the
  // agent in order, never meet the default action (an instant exit).
  const stopFetchers = stopFetchersFlag || config.stopFetchersOnExit;
  const stopped = new Promise<void>((resolve) => {
    const stop = (signal: NodeJS.Signals) => {
      logger.info({ signal, stopFetchers }, 'agent stopping');
      resolve();
    };
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
  });
  // The ready line is what scripts and tests wait for: it comes after the agent can serve. A person
  // at a terminal gets a short summary instead.
  const ready = { ready: true, pid: process.pid, port: server.port, mode: config.usePools ? 'pools' : 'serial', catalog: control.catalog.source, ...(metricsServer ? { metricsPort: metricsServer.port } : {}) };
  process.stdout.write(process.stdout.isTTY ? startSummary(config, ready, control.catalog.names().length) : `${JSON.stringify(ready)}\n`);
  logger.info({ pid: process.pid, lockDir: config.lockDir, dataDir: config.dataDir }, 'agent ready');
  await stopped;
  await metricsServer?.close();
  await server.close();
  agent.stopIntake();
  await agent.close(stopFetchers);
  logger.info({}, 'agent stopped');
  stopLogCap();
  return ExitCode.ok;
}
