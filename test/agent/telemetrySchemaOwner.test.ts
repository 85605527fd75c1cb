import assert from 'node:assert/strict';
import * as crypto from 'node:crypto';
import { after, before, test } from 'node:test';
import { memoryLogger } from '../support/memoryLogger';
import { migrate } from '../../agent/db/migrate';
import { Flusher } from '../../agent/telemetry/flusher';
import { connect, tempSpool } from '../fixtures/telemetryTestBed';
import { startTestPostgres, type TestPostgres } from '../support/postgres';

let db: TestPostgres;
// Roles belong to the whole cluster (which may be shared by CI): a name of this run only.
const OTHER = `qt_other_${crypto.randomBytes(4).toString('hex')}`;

before(async () => {
  db = await startTestPostgres();
});
after(async () => {
  const client = await connect(db.url);
  try {
    await client.query('DROP SCHEMA IF EXISTS core CASCADE');
    await client.query(`DROP ROLE IF EXISTS ${OTHER}`);
  } finally {
    await client.end();
  }
  await db?.stop();
});

test('a core schema that already exists, owned by another role, is refused with a clear message; nothing is created in it', async () => {
  const client = await connect(db.url);
  try {
    await client.query(`CREATE ROLE ${OTHER} NOLOGIN`);
    await client.query(`CREATE SCHEMA core AUTHORIZATION ${OTHER}`);
    // What that role could have prepared for us: a table shaped like ours, to receive our events.
    await client.query('CREATE TABLE core.schema_migration (version integer PRIMARY KEY, name text, applied_at timestamptz)');
    await client.query("INSERT INTO core.schema_migration VALUES (1, 'core_telemetry', now())");
    await client.query(`ALTER TABLE core.schema_migration OWNER TO ${OTHER}`);

    await assert.rejects(
      migrate(client, memoryLogger()),
      new RegExp(`schema "core" exists and is owned by role "${OTHER}", not by "postgres"`),
    );
    const tables = await client.query<{ t: string }>(
      "SELECT table_name AS t FROM information_schema.tables WHERE table_schema = 'core' ORDER BY 1",
    );
    assert.deepEqual(
      tables.rows.map((r) => r.t),
      ['schema_migration'],
      'nothing was created in it',
    );

    // The flush says the same and sends nothing.
    const bed = tempSpool();
    const flusher = new Flusher({ spool: bed.spool, databaseUrl: db.url, logger: bed.logger });
    try {
      bed.spool.emit({ runId: 'r', event: 'start', task: 't', pool: 'p', payload: {} });
      const result = await flusher.flushNow();
      assert.match(result.error ?? '', /owned by role/);
      assert.equal(result.remaining, 1);
    } finally {
      await flusher.close();
      bed.cleanup();
    }
  } finally {
    await client.end();
  }
});
