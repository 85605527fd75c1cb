import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Flusher } from '../../agent/telemetry/flusher';
import { emitInterleaved, planRuns } from '../fixtures/telemetryRuns';
import { connect, eventIdsIn, tempSpool, usePostgres } from '../fixtures/telemetryTestBed';
import { waitFor } from '../support/waitFor';

const pgdb = usePostgres();

async function backendsOf(app: string, extra = ''): Promise<number[]> {
  const result = await pgdb.client.query<{ pid: number }>(
    `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1 ${extra}`,
    [app],
  );
  return result.rows.map((r) => r.pid);
}

test('pg_terminate_backend on the flushing connection mid-flush: no crash, the next flush delivers everything once', async () => {
  const app = 'telemetry-terminate-busy';
  const bed = tempSpool();
  const flusher = new Flusher({ spool: bed.spool, databaseUrl: pgdb.url, logger: bed.logger, batchSize: 100, applicationName: app });
  const locker = await connect(pgdb.url);
  try {
    assert.equal((await flusher.flushNow()).error, null);
    const ids = emitInterleaved(bed.spool, planRuns(5, 100));
    // Hold the flush inside its INSERT, deterministically: a lock its INSERT has to wait for.
    await locker.query('BEGIN');
    await locker.query('LOCK TABLE core.task_run_log IN SHARE MODE');
    const flushing = flusher.flushNow();
    const [pid] = await waitFor(
      async () => {
        const pids = await backendsOf(app, "AND wait_event_type = 'Lock'");
        return pids.length === 1 ? pids : null;
      },
      { what: 'the flush to wait inside its INSERT', timeoutMs: 20_000 },
    );
    const killed = await pgdb.client.query<{ ok: boolean }>('SELECT pg_terminate_backend($1) AS ok', [pid]);
    assert.equal(killed.rows[0].ok, true);
    await waitFor(async () => !(await backendsOf(app)).includes(pid), { what: 'the terminated backend to go', timeoutMs: 20_000 });
    await locker.query('ROLLBACK');
    // The interrupted flush reports an error or, having retried on a new connection, success; it must
    // not throw, and nothing may be half-done.
    const first = await flushing;
    assert.ok(first.error === null || /terminat|connection/i.test(first.error), String(first.error));
    const second = await flusher.flushNow();
    assert.equal(second.error, null);
    assert.equal(second.remaining, 0);
    const stored = await eventIdsIn(pgdb.client);
    assert.equal(stored.length, ids.length);
    assert.deepEqual(new Set(stored), new Set(ids));
    assert.equal(bed.spool.status().database, 'connected');
  } finally {
    await locker.end();
    await flusher.close();
    bed.cleanup();
  }
});

test('pg_terminate_backend on idle pooled clients: the pool error is handled, the next flush succeeds', async () => {
  const app = 'telemetry-terminate-idle';
  const bed = tempSpool();
  const flusher = new Flusher({ spool: bed.spool, databaseUrl: pgdb.url, logger: bed.logger, applicationName: app });
  try {
    emitInterleaved(bed.spool, planRuns(2, 10));
    assert.equal((await flusher.flushNow()).error, null);
    const idle = await backendsOf(app, "AND state = 'idle'");
    assert.ok(idle.length >= 1, 'the pool keeps an idle pgdb.client after a flush');
    await pgdb.client.query('SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid', [idle]);
    // The idle pgdb.client learns of it asynchronously; an unhandled 'error' event would end this process.
    await waitFor(() => bed.logger.records.some((r) => r.msg === 'idle telemetry database connection lost'), {
      what: 'the idle connection loss to be logged',
      timeoutMs: 20_000,
    });
    const ids = emitInterleaved(bed.spool, planRuns(3, 10, Date.parse('2025-04-01T00:00:00Z')));
    const next = await flusher.flushNow();
    assert.equal(next.error, null);
    assert.equal(next.sent, ids.length);
    const stored = new Set(await eventIdsIn(pgdb.client));
    for (const id of ids) assert.ok(stored.has(id));
  } finally {
    await flusher.close();
    bed.cleanup();
  }
});
