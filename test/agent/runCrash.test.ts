import assert from 'node:assert/strict';
import * as path from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { connectAgent, type AgentClient } from '../../agent/client/agentClient';
import type { RunInfo } from '../../shared/protocol';
import { usePostgres } from '../fixtures/telemetryTestBed';
import { makeTestEnv, startAgent } from '../support/harness';
import { waitFor } from '../support/waitFor';

// The crash test: kill -9 of the agent at random moments while 500 runs go through it, 20
// times. A client enqueues over the protocol and enqueues again what was not acknowledged. In the
// end every run the agent recorded (acknowledged or not) is final, is exactly once in core.task_run
// with the status the agent's state has, and has no event twice.

const pgdb = usePostgres();
const RUNS = Number(process.env.CRASH_RUNS ?? 500);
const KILLS = Number(process.env.CRASH_KILLS ?? 20);
const FETCHERS = ['noop-heavy', 'noop-cpu', 'noop-light'];
const FINAL = new Set(['completed', 'failed', 'cancelled', 'skipped']);

test(
  '500 runs, 20 kill -9 of the agent at random moments: every run once in core.task_run, right status, no event twice',
  { timeout: 480_000 },
  async (t) => {
    const station = makeTestEnv(
      [
        { name: 'noop-heavy', pool: 'heavy-io', argv: ['/bin/true'] },
        { name: 'noop-cpu', pool: 'cpu-analysis', argv: ['/bin/true'] },
        { name: 'noop-light', pool: 'network-light', argv: ['/bin/true'] },
      ],
      { QUANTILICA_DATABASE_URL: pgdb.url, QUANTILICA_HEARTBEAT_SECONDS: '0.5' },
    );
    const connectionFile = path.join(station.home, '.quantilica', 'agent.json');
    const acknowledged = new Set<string>();
    let killsAt: number[] = [];
    const refusals: string[] = [];
    const enqueue = (client: AgentClient, count: number): Array<Promise<void>> =>
      Array.from({ length: count }, (_, i) =>
        client.run(FETCHERS[i % FETCHERS.length]).then(
          (run) => {
            acknowledged.add(run.runId);
          },
          (err: unknown) => {
            refusals.push(String(err)); /* not acknowledged: the agent died first; enqueued again in the next round */
          },
        ),
      );

    for (let kill = 0; kill < KILLS; kill++) {
      const agent = await startAgent(station);
      t.after(() => {
        agent.child.kill('SIGKILL');
      });
      const client = await connectAgent(connectionFile, { client: 'crash-test' });
      const exited = new Promise((resolve) => agent.child.once('exit', resolve));
      const sends = enqueue(client, Math.ceil((RUNS - acknowledged.size) / (KILLS - kill)) + 2);
      // The moment of the kill is the random part: anywhere from the first request to well after the last.
      const at = Math.floor(Math.random() * 400);
      killsAt = [...killsAt, at];
      await new Promise((resolve) => setTimeout(resolve, at));
      agent.child.kill('SIGKILL');
      await exited;
      await Promise.all(sends);
      await client.close().catch(() => {});
    }

    const last = await startAgent(station);
    // A client on a loaded machine may miss a ping and be dropped: it connects again, as a real one does.
    let client = await connectAgent(connectionFile, { client: 'crash-test' });
    const ask = async <T>(request: (c: AgentClient) => Promise<T>): Promise<T | null> => {
      try {
        return await request(client);
      } catch {
        await client.close().catch(() => {});
        client = await connectAgent(connectionFile, { client: 'crash-test' });
        return null;
      }
    };
    try {
      // The rest of the 500 through the last agent; what it did not acknowledge (a dropped connection)
      // is asked for again on a new connection, as a real client would.
      refusals.length = 0;
      for (let attempt = 0; acknowledged.size < RUNS && attempt < 5; attempt++) {
        if (attempt > 0) {
          await client.close().catch(() => {});
          client = await connectAgent(connectionFile, { client: 'crash-test' });
        }
        await Promise.all(enqueue(client, RUNS - acknowledged.size));
      }
      if (refusals.length > 0)
        t.diagnostic(`the last agent did not acknowledge ${refusals.length} requests: ${[...new Set(refusals)].join(' | ')}`);
      await waitFor(async () => (await ask((c) => c.listRuns(1000)))?.every((r) => FINAL.has(r.status)), {
        what: 'every run to end',
        timeoutMs: 120_000,
        intervalMs: 250,
      }).catch((err: unknown) => {
        throw new Error(`${String(err)}; the agent said: ${last.stderr().slice(-3000)}`);
      });
      await waitFor(
        async () => {
          const flushed = await ask((c) => c.flush());
          return flushed !== null && flushed.error === null && flushed.remaining === 0;
        },
        { what: 'the spool to be flushed', timeoutMs: 60_000, intervalMs: 500 },
      );
    } finally {
      await client.close().catch(() => {});
      last.child.kill('SIGTERM');
      await new Promise((resolve) => last.child.once('exit', resolve));
    }

    // The agent's state: read from the spool database, where it lives with the events.
    const db = new Database(path.join(station.home, '.quantilica', 'telemetry_spool.db'), { readonly: true });
    let state: RunInfo[];
    try {
      state = (db.prepare('SELECT body FROM runs').pluck().all() as string[]).map((b) => JSON.parse(b) as RunInfo);
    } finally {
      db.close();
    }
    t.diagnostic(`${state.length} runs recorded, ${acknowledged.size} acknowledged, kills at ${killsAt.join(', ')} ms`);
    assert.ok(acknowledged.size >= RUNS);
    const byId = new Map(state.map((r) => [r.runId, r]));
    for (const id of acknowledged) assert.ok(byId.has(id), `acknowledged run ${id} is in the agent's state`);
    for (const run of state) assert.ok(FINAL.has(run.status), `run ${run.runId} ended (${run.status})`);

    const rows = (
      await pgdb.client.query<{ run_id: string; status: string; exit_code: number | null; reason: string | null }>(
        'SELECT run_id, status, exit_code, reason FROM core.task_run',
      )
    ).rows;
    const inPg = new Map<string, typeof rows>();
    for (const row of rows) inPg.set(row.run_id, [...(inPg.get(row.run_id) ?? []), row]);
    for (const run of state) {
      const found = inPg.get(run.runId) ?? [];
      assert.equal(found.length, 1, `run ${run.runId} is once in core.task_run`);
      assert.deepEqual(
        [found[0].status, found[0].exit_code, found[0].reason],
        [run.status, run.exitCode, run.reason],
        `run ${run.runId}: state and telemetry agree`,
      );
      // A run that reached its spawn ran /bin/true; one that did not failed as never started.
      if (run.startedAt !== null)
        assert.deepEqual([run.status, run.exitCode], ['completed', 0], `run ${run.runId} started, so it completed`);
      else assert.equal(run.reason, 'owner-exited-while-waiting', `run ${run.runId} never started: ${JSON.stringify(run)}`);
    }
    assert.equal(inPg.size, state.length, 'no run in PostgreSQL that the agent does not know');
    const twice = (
      await pgdb.client.query<{ run_id: string; event: string; n: number }>(
        `SELECT run_id, event, count(*)::int AS n FROM core.task_run_log WHERE event IN ('start', 'finish', 'waiting') GROUP BY run_id, event HAVING count(*) > 1`,
      )
    ).rows;
    assert.deepEqual(twice, [], 'no event twice');
    const finishes = new Map(
      (
        await pgdb.client.query<{ run_id: string; n: number }>(
          `SELECT run_id, count(*)::int AS n FROM core.task_run_log WHERE event = 'finish' GROUP BY run_id`,
        )
      ).rows.map((r) => [r.run_id, r.n]),
    );
    for (const run of state) assert.equal(finishes.get(run.runId) ?? 0, 1, `run ${run.runId} has exactly one finish event`);
    const starts = (await pgdb.client.query<{ run_id: string }>(`SELECT run_id FROM core.task_run_log WHERE event = 'start'`)).rows;
    for (const { run_id: id } of starts)
      assert.notEqual(byId.get(id)?.startedAt ?? null, null, `run ${id} has a start event and a recorded start`);
  },
);
