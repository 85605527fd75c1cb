import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { ScheduleStatus, Snapshot } from '../../shared/protocol';
import { SEED_SOURCES } from '../../agent/catalog/seedSources';
import { makeTestEnv, runCli } from '../support/harness';

test('schedule lists the demo grid, pauses persist, bad names are refused', async () => {
  const t = makeTestEnv(null);
  const list = await runCli(t, ['schedule', '--json']);
  assert.equal(list.code, 0, list.stderr);
  const { schedule } = JSON.parse(list.stdout) as { schedule: ScheduleStatus };
  // The seed's sources plus the demo GitHub sync, each on its own schedule.
  assert.deepEqual(schedule.entries.map((e) => e.fetcher).sort(), [...SEED_SOURCES.map((s) => s.name), 'github'].sort());
  assert.ok(schedule.entries.every((e) => e.cron !== null && e.nextDue !== null && !e.paused));

  assert.equal((await runCli(t, ['schedule', 'pause', 'td'])).code, 0, 'aliases name their fetcher');
  assert.equal((await runCli(t, ['schedule', 'pause'])).code, 0);
  const status = JSON.parse((await runCli(t, ['status', '--json'])).stdout) as Snapshot;
  assert.equal(status.schedule!.paused, true);
  assert.equal(status.schedule!.entries.find((e) => e.fetcher === 'tesouro-direto')!.paused, true);
  assert.equal(status.schedule!.entries.find((e) => e.fetcher === 'comex')!.paused, false);
  assert.equal(status.disk!.state, 'ok', 'the gate measured the data dir');
  // Spool health is in status too: no database configured, nothing lost, a real spool path.
  assert.equal(status.spool!.database, 'not-configured');
  assert.equal(status.spool!.lost, 0);
  assert.equal(status.spool!.path, t.env.QUANTILICA_TELEMETRY_SPOOL);

  const bad = await runCli(t, ['schedule', 'pause', '../etc']);
  assert.equal(bad.code, 65);
  assert.match(bad.stderr, /unknown fetcher "\.\.\/etc"/);
});
