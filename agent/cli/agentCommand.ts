import type { Config } from '../config/config';
import { ExitCode } from '../exitCodes';
import { createLogger } from '../log/logger';
import { openAgent } from '../openAgent';
import { startAgentServer } from '../server/startAgentServer';
import { capStderrLog } from '../log/stderrLogCap';
import { logRunLines } from './runLines';
import { startSummary } from './startSummary';
import { checkEventHook } from '../events/checkEventHook';
import { startMetricsServer } from '../metrics/metricsServer';

/**
 * The foreground agent. It holds the single-instance lock, adopts runs a previous agent left, serves
 * the protocol, and on SIGTERM/SIGINT/SIGHUP stops taking runs while running fetchers go on (they keep their
 * slots and the next agent adopts them) unless told to stop them; waiting runs stay queued, in order,
 * for the next agent unless told to cancel them.
 */
export async function agentCommand(config: Config, stopFetchersFlag: boolean, cancelWaitingFlag = false): Promise<number> {
  // Human lines on a terminal (QUANTILICA_LOG_FORMAT=auto), JSON lines otherwise: the extension and
  // a service read the agent's log from a file.
  const logger = createLogger('quantilica-agent', config.logLevel ?? 'info', config.logFormat, { clock: true });
  checkEventHook(config.onEvent);
  const stopLogCap = capStderrLog(config.agentLogCapBytes);
  const agent = openAgent(config, logger, { role: 'agent' });
  const { control, catalog } = agent;
  const stopRunLines = logRunLines(control.hub, logger);
  await agent.start();
  const server = await startAgentServer(control, { port: config.port, connectionFile: config.connectionFile, logger });
  const metricsServer =
    config.metricsListen === null ? null : await startMetricsServer(config.metricsListen, () => agent.metricsBody(), logger);
  // Listen for the stop signals before saying ready: a signal sent on the ready line must stop the
  // agent in order, never meet the default action (an instant exit).
  const stopFetchers = stopFetchersFlag || config.stopFetchersOnExit;
  // Waiting runs stay queued for the next agent unless told otherwise.
  const cancelWaiting = cancelWaitingFlag || config.cancelWaitingOnExit;
  const stopped = new Promise<void>((resolve) => {
    let stopping = false;
    const stop = (signal: NodeJS.Signals) => {
      if (stopping) return;
      stopping = true;
      logger.info({ signal, stopFetchers, cancelWaiting }, 'agent stopping');
      resolve();
    };
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
    // A hangup (the terminal closed, or `kill -HUP` asking a daemon to reload) stops the agent
    // exactly as SIGTERM does: the catalog and settings are read once into the pools, slots and
    // schedule, so a reload would mean rebuilding them under running fetchers; a restart adopts
    // those fetchers and reads everything anew. Kept listening, so a second hangup during the stop
    // cannot meet the default action (an instant exit).
    process.on('SIGHUP', stop);
  });
  // The ready line is what scripts and tests wait for: it comes after the agent can serve. A person
  // at a terminal gets a short summary instead.
  const ready = {
    ready: true,
    pid: process.pid,
    port: server.port,
    mode: config.usePools ? 'pools' : 'serial',
    catalog: catalog.source,
    ...(metricsServer ? { metricsPort: metricsServer.port } : {}),
  };
  if (process.stdout.isTTY) process.stdout.write(startSummary(config, ready, catalog.entries));
  else {
    process.stdout.write(`${JSON.stringify(ready)}\n`);
    logger.info({ pid: process.pid, lockDir: config.lockDir, dataDir: config.dataDir }, 'agent ready');
  }
  await stopped;
  await metricsServer?.close();
  await server.close();
  agent.stopIntake();
  await agent.close(stopFetchers, cancelWaiting);
  stopRunLines();
  logger.info({}, 'agent stopped');
  stopLogCap();
  return ExitCode.ok;
}
