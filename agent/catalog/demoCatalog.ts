import type { Config } from '../config/config';
import { githubApiConfigured } from '../github/githubClient';
import { distFile } from '../paths';
import { Catalog, type CatalogEntry } from './catalog';
import { SEED_SOURCES } from './seedSources';

/**
 * The catalog used when none is configured: the seed's 25 sources in their pools, each a simulated
 * fetcher (`quantilica demo-fetch`) that really writes data into DATA_DIR, so a fresh install shows
 * real pools, slots, disk use and telemetry at work. Plus `github`, a GitHub sync (ADR 0006) against
 * the simulator the agent starts, with a 20 s quota window: it hibernates and resumes within a minute;
 * with GITHUB_TOKEN or QUANTILICA_GITHUB_API_URL set, against that API instead.
 */
export function demoCatalog(config: Config): Catalog {
  const { seconds, rateMb } = config.demo;
  const fetchers: CatalogEntry[] = SEED_SOURCES.map((source) => ({
    name: source.name,
    pool: source.pool,
    aliases: source.aliases,
    argv: [process.execPath, distFile('agent.js'), 'demo-fetch', source.name, '--seconds', String(seconds), '--rate-mb', String(rateMb)],
    expectedSizeMb: seconds * rateMb,
    schedule: source.schedule,
    demo: true,
  }));
  fetchers.push({
    kind: 'github-sync',
    name: 'github',
    pool: 'network-light',
    concurrency: 2,
    schedule: '17 */2 * * *',
    demo: true,
    simulated: !githubApiConfigured(),
    repos: Array.from({ length: 8 }, (_, i) => `sim-org/repo-${String(i + 1).padStart(3, '0')}`),
  });
  return new Catalog(fetchers, 'demo');
}
