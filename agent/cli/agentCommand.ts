import * as path from 'node:path';
import * as lockfile from 'proper-lockfile';
import type { Config } from '../config/config';
import { EnvironmentError } from '../errors';
import { ExitCode } from '../exitCodes';
import { createLogger } from '../log/logger';
import { createParts } from '../agentParts';
import { Orchestrator } from '../orchestrator';
import { checkStationDirs } from '../checkStationDirs';
import { startAgentServer } from '../server/startAgentServer';

/**
 * The foreground agent. It holds the single-instance lock, adopts runs a previous agent left, serves
 * the protocol, and on SIGTERM/SIGINT stops taking runs while running fetchers go on (they keep their
 * slots and the next agent adopts them) unless told to stop them.
 */
export async function agentCommand(config: Config, stopFetchersFlag: boolean): Promise<number> {
  const logger = createLogger('quantilica-agent');
  checkStationDirs(config);
  const release = await takeInstanceLock(config.homeDir);
  const parts = createParts(config, logger, 'agent');
  const orchestrator = new Orchestrator(config, logger, parts);
  await orchestrator.runs.adoptLeftovers();
  orchestrator.startRetention();
  await parts.start();
  const server = await startAgentServer(orchestrator, { port: config.port, connectionFile: config.connectionFile, logger });
  // The ready line is what scripts and tests wait for: it comes after the agent can serve.
  process.stdout.write(`${JSON.stringify({ ready: true, pid: process.pid, port: server.port, mode: config.usePools ? 'pools' : 'serial', catalog: orchestrator.catalog.source })}\n`);
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
  await release();
  logger.info({}, 'agent stopped');
  return ExitCode.ok;
}

/**
 * One agent per user and host. proper-lockfile's lock is a directory kept fresh by the holder; after
 * a kill -9 it goes stale within a few seconds, so a new agent retries for longer than that.
 */
async function takeInstanceLock(homeDir: string): Promise<() => Promise<void>> {
  const target = path.join(homeDir, 'agent');
  try {
    return await lockfile.lock(target, {
      realpath: false,
      lockfilePath: `${target}.lock`,
      stale: 4000,
      update: 1000,
      retries: { retries: 12, minTimeout: 500, maxTimeout: 1000 },
    });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ELOCKED') throw new EnvironmentError(`another agent is running for this user (lock ${target}.lock); stop it first or use its CLI`);
    throw new EnvironmentError(`cannot take the agent lock ${target}.lock (${code ?? String(err)})`);
  }
}
