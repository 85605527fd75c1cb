import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type pg from 'pg';
import { Flusher } from '../../agent/telemetry/flusher';
import { startTestPostgres, type TestPostgres } from '../support/postgres';
import { TelemetryProxy } from '../fixtures/telemetryProxy';
import { emitInterleaved, eventOf, planRuns } from '../fixtures/telemetryRuns';
import { connect, eventIdsIn, tempSpool } from '../fixtures/telemetryTestBed';
import { waitFor } from '../support/waitFor';

let db: TestPostgres;
let proxy: TelemetryProxy;
let client: pg.Client;

before(async () => {
  db = await startTestPostgres();
  proxy = await TelemetryProxy.start(db.url);
  client = await connect(db.url);
});
after(async () => {
  await client?.end();
  await proxy?.close();
  await db?.stop();
});

test('PostgreSQL down while 50 runs make 5,000 events, then up: all arrive once, in order, runs final', async () => {
  const bed = tempSpool();
  await proxy.down();
  const flusher = new Flusher({
    spool: bed.spool,
    databaseUrl: proxy.urlFor(db.url),
    logger: bed.logger,
    batchSize: 700,
    debounceMs: 20,
    retryInitialMs: 50,
    retryMaxMs: 400,
    connectTimeoutMs: 2_000,
  });
  try {
    flusher.start();
    const runs = planRuns(50, 100);
    const ids = emitInterleaved(bed.spool, runs);
    assert.equal(ids.length, 5_000);

    // The automatic flush tried and failed: events wait in the spool and status says why.
    const down = await waitFor(
      () => {
        const s = bed.spool.status();
        return s.lastFlushError !== null ? s : null;
      },
      { what: 'a failed automatic flush', timeoutMs: 20_000 },
    );
    assert.equal(down.database, 'down');
    assert.equal(down.pending, 5_000);
    assert.match(down.lastFlushError ?? '', /unreachable/);
    const early = await client.query<{ n: number }>("SELECT count(*)::int AS n FROM information_schema.tables WHERE table_schema = 'core'");
    assert.equal(early.rows[0].n, 0, 'nothing reached PostgreSQL while it was down');

    // Back up: no emit, no flushNow: the backoff timer alone must bring everything over.
    await proxy.up();
    const upStatus = await waitFor(
      () => {
        const s = bed.spool.status();
        return s.pending === 0 && s.database === 'connected' ? s : null;
      },
      { what: 'the spool to drain', timeoutMs: 30_000 },
    );
    assert.equal(upStatus.lastFlushError, null);
    assert.notEqual(upStatus.lastFlushAt, null);

    const stored = await eventIdsIn(client);
    assert.equal(stored.length, 5_000, 'no event twice, none missing');
    assert.deepEqual(new Set(stored), new Set(ids));

    const log = await client.query<{ run_id: string; events: string[]; ats: Date[]; seqs: string[] }>(`
      SELECT run_id, array_agg(event ORDER BY id) AS events, array_agg(at ORDER BY id) AS ats, array_agg(spool_seq ORDER BY id) AS seqs
      FROM core.task_run_log GROUP BY run_id`);
    assert.equal(log.rows.length, 50);
    for (const row of log.rows) {
      assert.equal(row.events.length, 100);
      assert.equal(row.events[0], 'start', row.run_id);
      assert.equal(row.events[99], 'finish', row.run_id);
      assert.ok(
        row.events.slice(1, 99).every((e) => e === 'heartbeat'),
        row.run_id,
      );
      for (let i = 1; i < 100; i += 1) {
        assert.ok(row.ats[i].getTime() > row.ats[i - 1].getTime(), `${row.run_id}: time order at ${i}`);
        assert.ok(BigInt(row.seqs[i]) > BigInt(row.seqs[i - 1]), `${row.run_id}: spool order at ${i}`);
      }
    }

    const taskRuns = await client.query<{
      run_id: string;
      task: string;
      pool: string;
      status: string;
      exit_code: number | null;
      signal: string | null;
      started_at: Date;
      finished_at: Date;
      duration_seconds: number;
      last_heartbeat_at: Date;
      event_count: string;
      host: string;
      pid: number;
      slot: number;
      argv: string[];
    }>('SELECT * FROM core.task_run');
    assert.equal(taskRuns.rows.length, 50);
    const byId = new Map(taskRuns.rows.map((r) => [r.run_id, r]));
    for (const run of runs) {
      const row = byId.get(run.runId);
      assert.ok(row, run.runId);
      assert.equal(row.status, run.status, run.runId);
      assert.equal(row.exit_code, run.exitCode, run.runId);
      assert.equal(row.signal, run.signal, run.runId);
      assert.equal(row.task, run.task);
      assert.equal(row.pool, run.pool);
      assert.equal(row.started_at.getTime(), run.startMs);
      assert.equal(row.finished_at.getTime(), run.startMs + 99_000);
      assert.equal(row.last_heartbeat_at.getTime(), run.startMs + 98_000);
      // Given in the finish for half the runs, derived from start and finish for the others.
      assert.equal(row.duration_seconds, 99, run.runId);
      assert.equal(Number(row.event_count), 100);
      assert.deepEqual([row.host, row.pid, row.slot, row.argv], ['test-host', 4242, 1, [run.task, '--full']]);
    }

    // A late heartbeat (after the finish) and a repeated finish-less start never move a run back.
    const late = runs[0];
    bed.spool.emit(eventOf(late, 50));
    bed.spool.emit({ ...eventOf(late, 0), at: new Date(late.startMs + 500_000).toISOString() });
    const result = await flusher.flushNow();
    assert.equal(result.error, null);
    const after = await client.query<{ status: string; exit_code: number; finished_at: Date; started_at: Date; event_count: string }>(
      'SELECT status, exit_code, finished_at, started_at, event_count FROM core.task_run WHERE run_id = $1',
      [late.runId],
    );
    assert.deepEqual(
      [
        after.rows[0].status,
        after.rows[0].exit_code,
        after.rows[0].finished_at.getTime(),
        after.rows[0].started_at.getTime(),
        Number(after.rows[0].event_count),
      ],
      [late.status, late.exitCode, late.startMs + 99_000, late.startMs, 102],
    );
  } finally {
    await flusher.close();
    bed.cleanup();
  }
});
