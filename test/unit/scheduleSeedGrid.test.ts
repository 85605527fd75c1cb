import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { Cron } from 'croner';
import type { PoolName } from '../../shared/protocol';
import { SEED_SOURCES } from '../../agent/catalog/seedSources';

const HOUR = 3_600_000;
/** Peak RAM per slot, from the seed's table (section 2): 12 GB over 3, 12 GB over 2, 3 GB over 6. */
const RAM_PER_RUN_GB: Record<PoolName, number> = { 'heavy-io': 4, 'cpu-analysis': 6, 'network-light': 0.5 };

/** Every due time of the seed grid in one week, per clock hour, in the zone the agent runs in. */
function dueByHour(timezone: string): Map<number, Array<{ name: string; pool: PoolName }>> {
  const start = new Date(Date.UTC(2025, 2, 10));
  const end = new Date(start.getTime() + 7 * 24 * HOUR);
  const byHour = new Map<number, Array<{ name: string; pool: PoolName }>>();
  for (const s of SEED_SOURCES) {
    const cron = new Cron(s.schedule, { timezone });
    for (let t = cron.nextRun(start); t !== null && t < end; t = cron.nextRun(t)) {
      const hour = Math.floor(t.getTime() / HOUR);
      byHour.set(hour, [...(byHour.get(hour) ?? []), { name: s.name, pool: s.pool }]);
    }
  }
  return byHour;
}

for (const timezone of ['UTC', 'America/Sao_Paulo']) {
  test(`the default grid (${timezone}): no two heavy-io sources due in the same hour, RAM ceiling 27 GB held`, () => {
    assert.equal(SEED_SOURCES.length, 25);
    const byHour = dueByHour(timezone);
    for (const [hour, due] of byHour) {
      const heavy = due.filter((d) => d.pool === 'heavy-io').map((d) => d.name);
      assert.ok(heavy.length <= 1, `${new Date(hour * HOUR).toISOString()}: heavy-io sources due together: ${heavy.join(', ')}`);
      // Even if every run due in an hour overlapped, their peak RAM stays under the pools' ceiling.
      const ram = due.reduce((sum, d) => sum + RAM_PER_RUN_GB[d.pool], 0);
      assert.ok(ram <= 27, `${new Date(hour * HOUR).toISOString()}: ${ram} GB if all due runs overlap`);
    }
    const heavyHours = new Set([...byHour].filter(([, d]) => d.some((x) => x.pool === 'heavy-io')).map(([h]) => h % 24));
    assert.equal(heavyHours.size, SEED_SOURCES.filter((s) => s.pool === 'heavy-io').length, 'each heavy-io source has an hour of its own');
  });
}
