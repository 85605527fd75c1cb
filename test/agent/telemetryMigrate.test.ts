import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type pg from 'pg';
import { memoryLogger } from '../support/memoryLogger';
import { migrate } from '../../agent/db/migrate';
import { MIGRATIONS } from '../../agent/db/migrations';
import { startTestPostgres, type TestPostgres } from '../support/postgres';
import { connect } from '../fixtures/telemetryTestBed';

let db: TestPostgres;

before(async () => {
  db = await startTestPostgres();
});
after(async () => {
  await db?.stop();
});

test('migrations: four processes migrating at once apply each version once, in one transaction each; again is a no-op', async () => {
  const clients = await Promise.all([1, 2, 3, 4].map(() => connect(db.url)));
  try {
    const applied = await Promise.all(clients.map((c) => migrate(c, memoryLogger())));
    // Exactly one of them did the work; the others waited on the advisory lock and found it done.
    assert.deepEqual(
      applied.filter((a) => a.length > 0),
      [MIGRATIONS.map((m) => m.version)],
    );
    const rows = await clients[0].query<{ version: number }>('SELECT version FROM core.schema_migration ORDER BY version');
    assert.deepEqual(
      rows.rows.map((r) => r.version),
      MIGRATIONS.map((m) => m.version),
    );
    assert.deepEqual(await migrate(clients[0], memoryLogger()), []);
    const tables = await clients[0].query<{ t: string }>(
      "SELECT table_name AS t FROM information_schema.tables WHERE table_schema = 'core' ORDER BY 1",
    );
    // pool, slot_holder, slot_waiter: the postgres slot backend.
    assert.deepEqual(
      tables.rows.map((r) => r.t),
      ['pool', 'run_cancel', 'schema_migration', 'slot_holder', 'slot_waiter', 'task_run', 'task_run_log'],
    );
  } finally {
    await Promise.all(clients.map((c) => c.end()));
  }
});

test('a failing migration leaves nothing behind: the whole set is one transaction', async () => {
  const broken = [
    ...MIGRATIONS,
    { version: MIGRATIONS.length + 1, name: 'broken', sql: 'CREATE TABLE core.half_done (x int); SELECT no_such_function();' },
  ];
  const client: pg.Client = await connect(db.url);
  try {
    await assert.rejects(migrate(client, memoryLogger(), broken), /no_such_function/);
    const half = await client.query<{ t: string | null }>("SELECT to_regclass('core.half_done')::text AS t");
    assert.equal(half.rows[0].t, null);
    const versions = await client.query<{ n: number }>('SELECT max(version) AS n FROM core.schema_migration');
    assert.equal(versions.rows[0].n, MIGRATIONS.length);
  } finally {
    await client.end();
  }
});
