import assert from 'node:assert/strict';
import * as crypto from 'node:crypto';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { memoryLogger } from '../support/memoryLogger';
import { Flusher } from '../../agent/telemetry/flusher';
import { TelemetryDatabase } from '../../agent/telemetry/telemetryDatabase';
import { eventIdsIn, tempSpool, usePostgres } from '../fixtures/telemetryTestBed';

const pgdb = usePostgres();

const event = (i: number) => ({ runId: `run-q-${i}`, event: 'heartbeat' as const, task: 'fetcher', pool: 'heavy-io', payload: { i } });

/** A row written into the spool by something other than our emit (an older writer, a damaged file). */
function plantRow(spoolPath: string, payload: string, eventId: string = crypto.randomUUID()): void {
  const db = new Database(spoolPath);
  try {
    db.pragma('busy_timeout = 10000');
    db.prepare('INSERT INTO event (event_id, run_id, event, at, task, pool, payload, spooled_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)').run(
      eventId,
      'run-bad',
      'heartbeat',
      new Date().toISOString(),
      'fetcher',
      'heavy-io',
      payload,
      Date.now(),
    );
  } finally {
    db.close();
  }
}

test(
  'a row that is not JSON, and one PostgreSQL refuses, go to the quarantine; the rows after them flush',
  { timeout: 120_000 },
  async () => {
    const bed = tempSpool();
    const flusher = new Flusher({ spool: bed.spool, databaseUrl: pgdb.url, logger: bed.logger });
    try {
      const early = [bed.spool.emit(event(1)), bed.spool.emit(event(2))];
      plantRow(bed.spoolPath, 'this is not JSON {');
      // Valid JSON to JavaScript, but jsonb refuses a lone surrogate (22P02): only PostgreSQL finds it.
      plantRow(bed.spoolPath, '{"text":"\\ud800"}');
      plantRow(bed.spoolPath, '{"ok":true}', 'not-a-uuid');
      const late = [bed.spool.emit(event(3)), bed.spool.emit(event(4))];

      const first = await flusher.flushNow();
      assert.equal(first.error, null, 'one bad row does not fail the flush');
      assert.equal(first.remaining, 0);
      const stored = new Set(await eventIdsIn(pgdb.client));
      for (const id of [...early, ...late]) assert.ok(id !== null && stored.has(id), `event ${id} reached PostgreSQL`);
      assert.equal(bed.spool.status().quarantined, 3);
      const db = new Database(bed.spoolPath, { readonly: true });
      try {
        const reasons = db.prepare('SELECT reason FROM quarantine ORDER BY seq').pluck().all() as string[];
        assert.deepEqual(reasons, ['invalid-payload', 'postgres-refused-22P02', 'invalid-event-id']);
      } finally {
        db.close();
      }
      // Later flushes are not blocked either.
      const again = bed.spool.emit(event(5));
      const second = await flusher.flushNow();
      assert.deepEqual([second.error, second.sent], [null, 1]);
      assert.ok(new Set(await eventIdsIn(pgdb.client)).has(again ?? ''));
      assert.ok(bed.logger.records.some((r) => r.level === 'error' && /quarantine/.test(r.msg ?? '')));
    } finally {
      await flusher.close();
      bed.cleanup();
    }
  },
);

test('the flush runs with a pinned search_path', async () => {
  const database = new TelemetryDatabase({ url: pgdb.url, logger: memoryLogger() });
  try {
    const path = await database.use(
      async (client) => (await client.query<{ search_path: string }>('SHOW search_path')).rows[0].search_path,
    );
    assert.equal(path.replace(/\s/g, ''), 'pg_catalog,pg_temp');
  } finally {
    await database.close();
  }
});
