import type { Config } from '../config/config';

/** What `npm start` shows a person at a terminal: where things are and what to try next. */
export function startSummary(config: Config, ready: { pid: number; port: number; mode: string; catalog: string }, fetchers: number): string {
  const pools = config.usePools
    ? Object.entries(config.pools).map(([name, pool]) => `${name} ${pool.slots}`).join(', ')
    : 'serial mode (one global lock; CRON_USE_POOLS=true for the three pools)';
  return [
    `Quantilica agent ready (pid ${ready.pid}, 127.0.0.1:${ready.port})`,
    `  pools:       ${pools}`,
    `  catalog:     ${ready.catalog} (${fetchers} fetchers)`,
    `  data:        ${config.dataDir}`,
    `  run logs:    ${config.logDir}`,
    `  spool:       ${config.telemetrySpool}${config.databaseUrl ? '' : ' (no QUANTILICA_DATABASE_URL: events stay here)'}`,
    `  connection:  ${config.connectionFile}`,
    `  slot locks:  ${config.lockDir}`,
    'Try, in another terminal:',
    '  node dist/agent.js status           # pools, runs, disk gate, spool, schedule',
    '  node dist/agent.js run <fetcher>    # a run through this agent; waits for it',
    '  node dist/agent.js schedule         # when each fetcher runs next',
    'Ctrl-C stops the agent; running fetchers go on and the next agent adopts them.',
    '',
  ].join('\n');
}
