import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { connect, usePostgres } from '../fixtures/telemetryTestBed';
import { FIXTURES, listRuns, makeTestEnv, runCli, startAgent } from '../support/harness';
import { waitFor } from '../support/waitFor';

const pgdb = usePostgres();

test(
  'every started run has exactly one start and one finish in PostgreSQL, across a kill -9 of the agent',
  { timeout: 180000 },
  async () => {
    const station = makeTestEnv(
      [
        { name: 'until-file', pool: 'network-light', argv: [path.join(FIXTURES, 'exitWhenFileExists.sh')] },
        { name: 'quick', pool: 'network-light', argv: ['true'] },
      ],
      { QUANTILICA_DATABASE_URL: pgdb.url, QUANTILICA_HEARTBEAT_SECONDS: '0.2' },
    );
    const release = path.join(station.root, 'release');
    const first = await startAgent(station);
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) {
      const r = await runCli(station, ['run', 'until-file', '--detach', '--json', '--', release, String(i)]);
      ids.push((JSON.parse(r.stdout) as RunInfo).runId);
    }
    const quick = await runCli(station, ['run', 'quick', '--json']);
    ids.push((JSON.parse(quick.stdout) as RunInfo).runId);
    await waitFor(async () => (await listRuns(station)).filter((r) => r.status === 'running').length === 4, {
      what: 'four runs running',
      timeoutMs: 20000,
    });

    first.child.kill('SIGKILL');
    await new Promise((resolve) => first.child.once('exit', resolve));
    fs.writeFileSync(release, '');
    const second = await startAgent(station);
    try {
      await waitFor(async () => (await listRuns(station)).filter((r) => ids.includes(r.runId) && r.status !== 'running').length === 5, {
        what: 'every run to end',
        timeoutMs: 30000,
      });
      const flushed = await runCli(station, ['flush']);
      assert.equal(flushed.code, 0, flushed.stderr + flushed.stdout);
      const client = await connect(pgdb.url);
      try {
        const rows = (
          await client.query<{ run_id: string; event: string; n: number }>(
            `SELECT run_id, event, count(*)::int AS n FROM core.task_run_log WHERE event IN ('start', 'finish') GROUP BY run_id, event`,
          )
        ).rows;
        for (const id of ids) {
          assert.equal(rows.find((r) => r.run_id === id && r.event === 'start')?.n, 1, `run ${id}: one start`);
          assert.equal(rows.find((r) => r.run_id === id && r.event === 'finish')?.n, 1, `run ${id}: one finish`);
        }
        const finals = (
          await client.query<{ run_id: string; status: string; exit_code: number }>(`SELECT run_id, status, exit_code FROM core.task_run`)
        ).rows;
        for (const [i, id] of ids.slice(0, 4).entries()) {
          assert.deepEqual(
            finals.find((r) => r.run_id === id),
            { run_id: id, status: i === 0 ? 'completed' : 'failed', exit_code: i },
          );
        }
      } finally {
        await client.end();
      }
    } finally {
      second.child.kill('SIGTERM');
      await new Promise((resolve) => second.child.once('exit', resolve));
    }
  },
);

test('with no agent, `quantilica telemetry emit` then `quantilica flush` carry an event to PostgreSQL, touching nothing else', async () => {
  const station = makeTestEnv(null, { QUANTILICA_DATABASE_URL: pgdb.url });
  const emitted = await runCli(station, ['telemetry', 'emit', 'start', '--task', 'script', '--pool', 'heavy-io']);
  assert.equal(emitted.code, 0, emitted.stderr);
  const runId = / of run ([0-9a-f-]{36}) /.exec(emitted.stdout)?.[1];
  assert.ok(runId, emitted.stdout);
  const flushed = await runCli(station, ['flush']);
  assert.equal(flushed.code, 0, flushed.stderr + flushed.stdout);
  assert.match(flushed.stdout, /flush: 1 sent, 0 remaining/);
  const rows = (await pgdb.client.query<{ event: string }>('SELECT event FROM core.task_run_log WHERE run_id = $1', [runId])).rows;
  assert.deepEqual(rows, [{ event: 'start' }]);
  assert.equal(fs.existsSync(path.join(station.home, '.quantilica', 'state.db')), false, 'a flush needs no run state');
});
