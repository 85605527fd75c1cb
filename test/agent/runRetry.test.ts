// Retries per catalog entry: one run, several tries, each after its backoff (equal jitter: at least half
// the delay), the slot given back in between, the wake-up kept across a kill -9 of the agent, and one
// core.task_run row whose `attempts` counts the tries.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo, Snapshot } from '../../shared/protocol';
import { memoryLogger } from '../support/memoryLogger';
import { Spool } from '../../agent/telemetry/spool';
import { connect, usePostgres } from '../fixtures/telemetryTestBed';
import { FIXTURES, listRuns, makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';
import { waitFor } from '../support/waitFor';

const FAIL_TIMES = path.join(FIXTURES, 'failTimesThenSucceed.sh');
const pgdb = usePostgres();
const stations: TestEnv[] = [];
after(() => {
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

function exited(child: import('node:child_process').ChildProcess): Promise<number | null> {
  return child.exitCode !== null ? Promise.resolve(child.exitCode) : new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

function tryTimes(counter: string): number[] {
  return fs.readFileSync(`${counter}.times`, 'utf8').trim().split('\n').map(Number);
}

function spoolEvents(t: TestEnv, runId: string): Array<{ event: string; eventId: string; payload: Record<string, unknown> }> {
  const spool = new Spool({
    path: path.join(t.home, '.quantilica', 'telemetry_spool.db'),
    logger: memoryLogger(),
    fallbackPath: path.join(t.root, 'fallback.db'),
  });
  try {
    return spool
      .readBatch(100000)
      .filter((e) => e.runId === runId)
      .map((e) => ({ event: e.event, eventId: e.eventId, payload: JSON.parse(e.payload) as Record<string, unknown> }));
  } finally {
    spool.close();
  }
}

test(
  'exit 75 twice, then 0, under attempts 3: one run, three tries spaced by at least half their delays, the CLI exits 0, core.task_run has one row with attempts = 3',
  { timeout: 180000 },
  async () => {
    const counter = path.join(makeTestEnv(null).root, 'tries');
    const t = makeTestEnv(
      [
        {
          name: 'flaky',
          pool: 'cpu-analysis',
          argv: [FAIL_TIMES, counter, '2', '75'],
          retry: { attempts: 3, backoffSeconds: 1, maxBackoffSeconds: 4, exitCodes: [75, 1] },
        },
      ],
      { QUANTILICA_DATABASE_URL: pgdb.url, CRON_POOL_CPU_ANALYSIS_SLOTS: '1' },
    );
    stations.push(t);
    const agent = await startAgent(t);
    try {
      const r = await runCli(t, ['run', 'flaky', '--json'], 120000);
      assert.equal(r.code, 0, `the CLI exits with the last try's code: ${r.stderr}`);
      const done = JSON.parse(r.stdout) as RunInfo;
      assert.deepEqual([done.status, done.attempt, done.attempts, done.exitCode], ['completed', 3, 3, 0]);
      assert.equal(fs.readFileSync(counter, 'utf8').trim(), '3', 'three tries, no more');
      const times = tryTimes(counter);
      // Delays 1 s then 2 s (backoff × 2^(n−1)); equal jitter waits at least half of each.
      assert.ok(times[1] - times[0] >= 500, `try 2 came ${times[1] - times[0]} ms after try 1`);
      assert.ok(times[2] - times[1] >= 1000, `try 3 came ${times[2] - times[1]} ms after try 2`);
      assert.equal((await listRuns(t)).filter((x) => x.fetcher === 'flaky').length, 1, 'one run, not three');

      const flushed = await runCli(t, ['flush']);
      assert.equal(flushed.code, 0, flushed.stderr + flushed.stdout);
      const client = await connect(pgdb.url);
      try {
        const rows = (
          await client.query<{ status: string; attempts: number; exit_code: number }>(
            'SELECT status, attempts, exit_code FROM core.task_run WHERE run_id = $1',
            [done.runId],
          )
        ).rows;
        assert.deepEqual(rows, [{ status: 'completed', attempts: 3, exit_code: 0 }]);
        const log = (
          await client.query<{ event: string; attempt: number | null }>(
            `SELECT event, (payload->>'attempt')::int AS attempt FROM core.task_run_log WHERE run_id = $1 AND event IN ('start', 'finish') ORDER BY spool_seq`,
            [done.runId],
          )
        ).rows;
        assert.deepEqual(log, [
          { event: 'start', attempt: 1 },
          { event: 'start', attempt: 2 },
          { event: 'start', attempt: 3 },
          { event: 'finish', attempt: 3 },
        ]);
      } finally {
        await client.end();
      }
    } finally {
      agent.child.kill('SIGTERM');
      await exited(agent.child);
    }
  },
);

test(
  'a kill -9 of the agent during a backoff: exactly one further try, at its time, from the next agent; runs and status say "attempt 2 of 2 · retry at"',
  { timeout: 180000 },
  async () => {
    const counter = path.join(makeTestEnv(null).root, 'tries');
    const t = makeTestEnv([
      { name: 'flaky', pool: 'cpu-analysis', argv: [FAIL_TIMES, counter, '1', '75'], retry: { attempts: 2, backoffSeconds: 12 } },
    ]);
    stations.push(t);
    let agent = await startAgent(t);
    try {
      const r = await runCli(t, ['run', 'flaky', '--detach', '--json']);
      assert.equal(r.code, 0, r.stderr);
      const runId = (JSON.parse(r.stdout) as RunInfo).runId;
      const backing = await waitFor(async () => (await listRuns(t)).find((x) => x.runId === runId && x.reason === 'retry-backoff'), {
        what: 'the run to wait for its retry',
        timeoutMs: 30000,
      });
      assert.equal(backing.status, 'waiting');
      assert.equal(backing.wait?.kind, 'retry');
      const until = backing.wait?.kind === 'retry' ? Date.parse(backing.wait.until) : NaN;
      assert.equal(backing.wait?.kind === 'retry' ? backing.wait.attempt : null, 2);
      assert.equal(backing.slot, null, 'the slot is given back between tries');
      const table = await runCli(t, ['runs']);
      assert.match(table.stdout, /attempt 2 of 2 · retry at \d\d:\d\d/);
      const status = await runCli(t, ['status']);
      assert.match(status.stdout, /attempt 2 of 2 · retry at \d\d:\d\d/);
      const snapshot = JSON.parse((await runCli(t, ['status', '--json'])).stdout) as Snapshot;
      const inSnapshot = snapshot.runs.find((x) => x.runId === runId)!;
      assert.deepEqual([inSnapshot.attempt, inSnapshot.attempts], [1, 2]);

      agent.child.kill('SIGKILL');
      await exited(agent.child);
      agent = await startAgent(t);
      const done = await waitFor(
        async () => {
          const x = (await listRuns(t)).find((y) => y.runId === runId);
          return x && x.status !== 'waiting' && x.status !== 'running' ? x : null;
        },
        { what: 'the next agent to make the second try', timeoutMs: 60000 },
      );
      assert.deepEqual([done.status, done.attempt, done.exitCode], ['completed', 2, 0]);
      assert.equal(fs.readFileSync(counter, 'utf8').trim(), '2', 'exactly one further try');
      const times = tryTimes(counter);
      assert.ok(
        times[1] >= until,
        `the second try came at its time (${new Date(times[1]).toISOString()} >= ${new Date(until).toISOString()})`,
      );
      agent.child.kill('SIGTERM');
      assert.equal(await exited(agent.child), 0);
      const events = spoolEvents(t, runId);
      const starts = events.filter((e) => e.event === 'start');
      assert.deepEqual(
        starts.map((e) => e.payload.attempt),
        [1, 2],
      );
      assert.notEqual(starts[0].eventId, starts[1].eventId, 'each try has a start of its own');
      assert.equal(events.filter((e) => e.event === 'finish').length, 1);
      const retrying = events.filter((e) => e.event === 'waiting' && (e.payload.reason as { kind?: string } | null)?.kind === 'retry');
      assert.equal(retrying.length, 1, 'the try that failed is recorded as waiting for its retry');
      assert.equal(retrying[0].payload.exitCode, 75);
    } finally {
      if (agent.child.exitCode === null) agent.child.kill('SIGKILL');
    }
  },
);
