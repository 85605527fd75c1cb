import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { Catalog, isGithubSync, type CatalogEntry, type FetcherEntry } from '../../agent/catalog/catalog';
import { loadConfig } from '../../agent/config/config';
import { ConfigError } from '../../agent/config/configError';
import { memoryBudgetWarning } from '../../agent/memory/memoryBudget';

const base = { HOME: '/home/op', QUANTILICA_CONFIG: undefined };

test("memory settings: the seed's ceilings and reserve by default; bad values refused with the variable named", () => {
  const config = loadConfig({ ...base });
  assert.deepEqual(
    Object.values(config.pools).map((p) => p.memoryMb),
    [12 * 1024, 12 * 1024, 3 * 1024],
  );
  assert.deepEqual(config.memory, { reserveMb: 5 * 1024, cgroupName: null, enforce: true });
  assert.equal(loadConfig({ ...base, CRON_POOL_NETWORK_LIGHT_MEMORY_GB: '0.25' }).pools['network-light'].memoryMb, 256);
  for (const [name, value] of [
    ['CRON_POOL_HEAVY_IO_MEMORY_GB', 'lots'],
    ['CRON_POOL_CPU_ANALYSIS_MEMORY_GB', '0'],
    ['QUANTILICA_MEMORY_RESERVE_GB', '-1'],
    ['QUANTILICA_CGROUP_NAME', '../escape'],
  ]) {
    assert.throws(
      () => loadConfig({ ...base, [name]: value }),
      (err: unknown) => err instanceof ConfigError && err.message.includes(name),
      `${name}=${value}`,
    );
  }
});

test('the budget: 27 GB of pools and 5 GB reserved fit a 32 GB station, not a 24 GB one (a warning, not a refusal)', () => {
  const seed = [12 * 1024, 12 * 1024, 3 * 1024];
  assert.equal(memoryBudgetWarning(seed, 5 * 1024, 32 * 1024), null);
  assert.match(memoryBudgetWarning(seed, 5 * 1024, 24 * 1024) ?? '', /27 GB.*5 GB.*24 GB/);
  assert.equal(memoryBudgetWarning(seed, 0, 27 * 1024), null);
});

/** The entry as a fetcher (a GitHub sync entry has no memoryMb). */
function fetcherOf(entry: CatalogEntry): FetcherEntry {
  assert.ok(!isGithubSync(entry), 'a fetcher entry');
  return entry;
}

test('catalog memoryMb: a whole number of MB of at least 8, optional', () => {
  const entry = { name: 'f', pool: 'heavy-io', argv: ['true'] };
  assert.equal(fetcherOf(Catalog.parse({ fetchers: [{ ...entry, memoryMb: 512 }] }, 'c').resolve('f')).memoryMb, 512);
  assert.equal(fetcherOf(Catalog.parse({ fetchers: [entry] }, 'c').resolve('f')).memoryMb, undefined);
  for (const bad of [4, 1.5, '512']) assert.throws(() => Catalog.parse({ fetchers: [{ ...entry, memoryMb: bad }] }, 'c'), ConfigError);
});
