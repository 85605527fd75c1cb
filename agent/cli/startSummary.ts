import * as path from 'node:path';
import type { CatalogEntry } from '../catalog/catalog';
import type { Config } from '../config/config';
import { zoneOf } from './timeText';

/**
 * What `npm start` shows a person at a terminal: where things are and what to try next, with a
 * fetcher of this catalog to run and, when the catalog has one, its GitHub sync.
 */
export function startSummary(
  config: Config,
  ready: { pid: number; port: number; mode: string; catalog: string },
  entries: readonly CatalogEntry[],
  cli = cliName(),
): string {
  const pools = config.usePools
    ? Object.entries(config.pools)
        .map(([name, pool]) => `${name} ${pool.slots}`)
        .join(', ')
    : 'serial mode (one global lock; CRON_USE_POOLS=true for the three pools)';
  const fetchers = entries.filter((e) => e.kind !== 'github-sync');
  // A light fetcher first: the first thing tried should end soon and take no heavy slot.
  const sample = fetchers.find((e) => e.pool === 'network-light') ?? fetchers[0];
  const sync = entries.find((e) => e.kind === 'github-sync');
  const tries: Array<[string, string]> = [
    ...(sample
      ? [[`run ${sample.name}`, `${sample.demo ? 'a demo fetcher' : 'a fetcher'}, through this agent; waits for it`] as [string, string]]
      : []),
    ...(sync
      ? [
          [`github sync --wait`, sync.demo ? 'the demo GitHub sync (a simulated GitHub, no token needed)' : 'the GitHub sync'] as [
            string,
            string,
          ],
        ]
      : []),
    ['status', 'pools, runs, disk gate, spool, schedule'],
    ['schedule', 'when each fetcher runs next'],
  ];
  const width = Math.max(...tries.map(([command]) => command.length));
  return [
    '',
    `Quantilica agent ready (pid ${ready.pid}, 127.0.0.1:${ready.port}); log times are local (${zoneOf(new Date())})`,
    `  pools:       ${pools}`,
    `  catalog:     ${ready.catalog} (${entries.length} fetchers)`,
    `  data:        ${config.dataDir}`,
    `  run logs:    ${config.logDir}`,
    `  spool:       ${config.telemetrySpool}${config.databaseUrl ? '' : ' (no QUANTILICA_DATABASE_URL: events stay here)'}`,
    `  connection:  ${config.connectionFile}`,
    `  slot locks:  ${config.lockDir}`,
    'Try, in another terminal:',
    ...tries.map(([command, what]) => `  ${cli} ${command.padEnd(width)}  # ${what}`),
    'Ctrl-C stops the agent; running fetchers go on and the next agent adopts them.',
    '',
    '',
  ].join('\n');
}

/** How this agent was started, as a person would type it again: `quantilica` or `node dist/agent.js`. */
function cliName(): string {
  const script = process.argv[1] ?? 'dist/agent.js';
  if (path.basename(script) === 'quantilica') return 'quantilica';
  const relative = path.relative(process.cwd(), script);
  return `node ${relative.startsWith('..') || path.isAbsolute(relative) ? script : relative}`;
}
