import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Flusher } from '../../agent/telemetry/flusher';
import { spawnFlushOnce } from '../fixtures/telemetryChild';
import { emitInterleaved, planRuns } from '../fixtures/telemetryRuns';
import { eventIdsIn, tempSpool, usePostgres } from '../fixtures/telemetryTestBed';

const pgdb = usePostgres();

test('two flushing processes started together on one spool: each event is sent once, not just stored once', async () => {
  const bed = tempSpool();
  const flusher = new Flusher({ spool: bed.spool, databaseUrl: pgdb.url, logger: bed.logger });
  try {
    // Schema first, so that both children go straight to sending.
    assert.equal((await flusher.flushNow()).error, null);
    const ids = emitInterleaved(bed.spool, planRuns(20, 100));
    const env = { TEST_SPOOL: bed.spoolPath, TEST_DATABASE_URL: pgdb.url, TEST_BATCH_SIZE: '50', TEST_WAIT_FOR_GO: '1' };
    const children = [spawnFlushOnce(env), spawnFlushOnce(env)];
    await Promise.all(children.map((c) => c.ready));
    for (const c of children) c.go();
    const exits = await Promise.all(children.map((c) => c.exit));
    for (const exit of exits) {
      assert.equal(exit.code, 0, exit.stderr);
      assert.ok(exit.outcome !== null);
      assert.equal(exit.outcome.error, null);
    }
    // ON CONFLICT would hide a batch sent twice from PostgreSQL's row count; `sent` counts what each
    // process shipped, so a batch read and sent by both would push the sum above the total.
    const shipped = exits.reduce((sum, e) => sum + (e.outcome?.sent ?? 0), 0);
    const inserted = exits.reduce((sum, e) => sum + (e.outcome?.inserted ?? 0), 0);
    assert.equal(shipped, ids.length, `shipped ${exits.map((e) => e.outcome?.sent).join(' + ')}`);
    assert.equal(inserted, ids.length);
    assert.equal(bed.spool.pending(), 0);
    const stored = await eventIdsIn(pgdb.client);
    assert.equal(stored.length, ids.length);
    assert.deepEqual(new Set(stored), new Set(ids));
  } finally {
    await flusher.close();
    bed.cleanup();
  }
});
