import type { Config } from '../config/config';
import { ExitCode } from '../exitCodes';
import { createLogger } from '../log/logger';
import { createParts } from '../agentParts';
import { Orchestrator } from '../orchestrator';
import { checkStationDirs } from '../checkStationDirs';
import { startAgentServer } from '../server/startAgentServer';
import { takeInstanceLock } from './instanceLock';
import { capStderrLog } from '../log/stderrLogCap';
import { secureHome } from './checkSettingPaths';
import { startSummary } from './startSummary';

/**
 * The foreground agent. It holds the single-instance lock, adopts runs a previous agent left, serves
 * the protocol, and on SIGTERM/SIGINT stops taking runs while running fetchers go on (they keep their
 * slots and the next agent adopts them) unless told to stop them.
 */
export async function agentCommand(config: Config, stopFetchersFlag: boolean): Promise<number> {
  const logger = createLogger('quantilica-agent', config.logLevel ?? 'info', config.logFormat === 'human' ? 'human' : 'json');
  const stopLogCap = capStderrLog(config.agentLogCapBytes);
  checkStationDirs(config);
  secureHome(config.homeDir);
  const release = takeInstanceLock(config.homeDir);
  const parts = createParts(config, logger, 'agent');
  const orchestrator = new Orchestrator(config, logger, parts);
  await orchestrator.runs.adoptLeftovers();
  orchestrator.startRetention();
  await parts.start();
  const server = await startAgentServer(orchestrator, { port: config.port, connectionFile: config.connectionFile, logger });
  // The ready line is what scripts and tests wait for: it comes after the agent can serve. A person
  // at a terminal gets a short summary instead.
  const ready = { ready: true, pid: process.pid, port: server.port, mode: config.usePools ? 'pools' : 'serial', catalog: orchestrator.catalog.source };
  process.stdout.write(process.stdout.isTTY ? startSummary(config, ready, orchestrator.catalog.names().length) : `${JSON.stringify(ready)}\n`);
  logger.info({ pid: process.pid, lockDir: config.lockDir, dataDir: config.dataDir }, 'agent ready');

  const stopFetchers = stopFetchersFlag || config.stopFetchersOnExit;
  await new Promise<void>((resolve) => {
    const stop = (signal: NodeJS.Signals) => {
      logger.info({ signal, stopFetchers }, 'agent stopping');
      resolve();
    };
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
  });
  await server.close();
  parts.stopIntake();
  await orchestrator.close(stopFetchers);
  await parts.close();
  release();
  logger.info({}, 'agent stopped');
  stopLogCap();
  return ExitCode.ok;
}
