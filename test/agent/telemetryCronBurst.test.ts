import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { connect, usePostgres } from '../fixtures/telemetryTestBed';
import { makeTestEnv, runCli } from '../support/harness';
import { countByRun, spoolRowsIn } from '../support/spoolRows';

const pgdb = usePostgres();
const RUNS = 100;

test(
  `a cron burst of ${RUNS} \`quantilica run\` with no agent: every run's start and finish in the configured spool, exactly once`,
  { timeout: 600_000 },
  async (t) => {
    // As on a cron station: the database is configured, so each process also flushes what it spooled.
    const station = makeTestEnv([{ name: 'quick', pool: 'network-light', argv: ['/bin/true'] }], { QUANTILICA_DATABASE_URL: pgdb.url });
    // The fallback folder of these processes: private to the test, so we can prove nothing went there.
    const runtime = path.join(station.root, 'runtime');
    fs.mkdirSync(runtime, { mode: 0o700 });
    station.env.XDG_RUNTIME_DIR = runtime;
    station.env.CRON_POOL_NETWORK_LIGHT_SLOTS = String(RUNS);
    const spoolPath = station.env.QUANTILICA_TELEMETRY_SPOOL as string;
    t.after(() => fs.rmSync(station.root, { recursive: true, force: true }));

    // Cron starts them in the same second; a pool as large as the burst lets them all write at once.
    const results = await Promise.all(Array.from({ length: RUNS }, () => runCli(station, ['run', 'quick'], 540_000)));
    const runIds = results.map((r) => /^run (\S+) quick queued/m.exec(r.stdout)?.[1]);
    const failed = results.filter((r) => r.code !== 0);
    assert.deepEqual(
      failed.map((r) => `${r.code}: ${r.stderr.slice(0, 400)}`),
      [],
      'every run exits 0',
    );
    assert.ok(
      runIds.every((id) => id !== undefined),
      'every run printed its id',
    );

    // Each process flushed what it could: an event is in PostgreSQL or still in the configured spool.
    const client = await connect(pgdb.url);
    let flushed: Array<{ eventId: string; runId: string; event: string }>;
    try {
      flushed = (
        await client.query<{ eventId: string; runId: string; event: string }>(
          'SELECT event_id AS "eventId", run_id AS "runId", event FROM core.task_run_log',
        )
      ).rows;
    } finally {
      await client.end();
    }
    const rows = [...spoolRowsIn(spoolPath), ...flushed];
    const starts = countByRun(rows, 'start');
    const finishes = countByRun(rows, 'finish');
    const wrong = runIds
      .filter((id) => starts.get(id ?? '') !== 1 || finishes.get(id ?? '') !== 1)
      .map((id) => `${id}: ${starts.get(id ?? '') ?? 0} start, ${finishes.get(id ?? '') ?? 0} finish`);
    assert.deepEqual(wrong, [], 'one start and one finish per run, in the configured spool or flushed from it');
    assert.equal(new Set(rows.map((r) => r.eventId)).size, rows.length, 'no event twice');
    const fallback = path.join(runtime, 'quantilica', 'quantilica_telemetry_spool.db');
    assert.equal(spoolRowsIn(fallback).length, 0, 'nothing left in the fallback spool');
    assert.ok(!results.some((r) => /LOST|SQLITE_BUSY/.test(r.stderr)), 'no process reports a loss or SQLITE_BUSY');
  },
);
