import * as path from 'node:path';
import * as fs from 'node:fs';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { PoolState } from '../../shared/protocol';
import { connectAgent } from '../../agent/client/agentClient';
import { FIXTURES, makeTestEnv, runCli, startAgent, testConfig, type FetcherSpec } from '../support/harness';
import { startTestPostgres } from '../support/postgres';
import { pgStation } from '../support/pgStations';
import { waitFor } from '../support/waitFor';

// Choosing the slot backend, refusing what cannot hold session locks, and showing every
// station's holders.

test(
  'a bad QUANTILICA_SLOT_BACKEND, postgres without a URL, or a pooler URL stop the command with exit 78',
  { timeout: 60_000 },
  async () => {
    const bad = makeTestEnv(null, { QUANTILICA_SLOT_BACKEND: 'redis' });
    let r = await runCli(bad, ['status']);
    assert.equal(r.code, 78, r.stderr);
    assert.match(r.stderr, /QUANTILICA_SLOT_BACKEND="redis": allowed: file, postgres/);

    const noUrl = makeTestEnv(null, { QUANTILICA_SLOT_BACKEND: 'postgres' });
    r = await runCli(noUrl, ['status']);
    assert.equal(r.code, 78, r.stderr);
    assert.match(r.stderr, /QUANTILICA_SLOT_DATABASE_URL or QUANTILICA_DATABASE_URL/);

    // PgBouncer's port: refused before any connection is tried (nothing listens there in this test).
    for (const url of ['postgres://u:secret@127.0.0.1:6432/db', 'postgres://u:secret@127.0.0.1:5432/db?pgbouncer=true']) {
      const pooler = makeTestEnv(null, { QUANTILICA_SLOT_BACKEND: 'postgres', QUANTILICA_SLOT_DATABASE_URL: url });
      r = await runCli(pooler, ['agent']);
      assert.equal(r.code, 78, r.stderr);
      assert.match(r.stderr, /connection pooler \(PgBouncer\)/);
      assert.doesNotMatch(r.stderr, /secret/, 'the password is never shown');
    }
  },
);

test('status and slots on any station show the holders of every station', { timeout: 120_000 }, async () => {
  const db = await startTestPostgres();
  const untilFile: FetcherSpec[] = [{ name: 'until-file', pool: 'heavy-io', argv: [path.join(FIXTURES, 'exitWhenFileExists.sh')] }];
  const a = pgStation(db.url, 'station-a', untilFile);
  const b = pgStation(db.url, 'station-b', untilFile);
  const agent = await startAgent(a);
  const client = await connectAgent(testConfig(a).connectionFile, { client: 'pg-slot-status' });
  const release = path.join(a.root, 'release');
  try {
    const run = await client.run('until-file', [release, '0']);
    const pid = await waitFor(async () => (await client.listRuns(10)).find((r) => r.runId === run.runId && r.status === 'running')?.pid, {
      what: 'the run to start',
      timeoutMs: 60_000,
    });
    // Station b has no agent: its CLI works in-process and reads the shared tables.
    const slots = await runCli(b, ['slots', '--json']);
    assert.equal(slots.code, 0, slots.stderr);
    const heavy = (JSON.parse(slots.stdout) as { pools: PoolState[] }).pools.find((p) => p.name === 'heavy-io')!;
    assert.equal(heavy.used, 1);
    const holder = heavy.slots.find((s) => s.holder !== null)!.holder!;
    assert.deepEqual(
      { station: holder.station, runId: holder.runId, pid: holder.pid, foreign: holder.foreign },
      { station: 'station-a', runId: run.runId, pid, foreign: true },
    );
    const status = await runCli(b, ['status']);
    assert.equal(status.code, 0, status.stderr);
    assert.match(
      status.stdout,
      new RegExp(
        `postgres:core.pool/heavy-io/\\d+ +pid ${pid} until-file run ${run.runId} since \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d \\S+ on station-a`,
      ),
    );
    fs.writeFileSync(release, '');
    assert.equal((await client.waitRun(run.runId)).status, 'completed');
    // A cron-style CLI run with no agent on station b takes a shared slot in-process and exits.
    const cli = await runCli(b, ['run', 'until-file', '--', release, '7']);
    assert.equal(cli.code, 7, cli.stderr);
  } finally {
    await client.close();
    agent.child.kill('SIGTERM');
    await new Promise((r) => agent.child.once('exit', r));
    await db.stop();
  }
});
