import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { connectAgent, type AgentClient } from '../../agent/client/agentClient';
import { FIXTURES, groupExists, startAgent, testConfig, type FetcherSpec, type TestEnv } from '../support/harness';
import { startTestPostgres, type TestPostgres } from '../support/postgres';
import { pgStation, SlotObserver } from '../support/pgStations';
import { waitFor } from '../support/waitFor';

// What happens to the postgres backend's slots when a station's agent is killed, when a
// slot's session is terminated, and when an operator resizes a pool in core.pool.

const untilFile: FetcherSpec[] = [{ name: 'until-file', pool: 'heavy-io', argv: [path.join(FIXTURES, 'exitWhenFileExists.sh')] }];

interface Station {
  env: TestEnv;
  agent: Awaited<ReturnType<typeof startAgent>>;
  client: AgentClient;
}

async function openStations(db: TestPostgres, n: number): Promise<Station[]> {
  const stations: Station[] = [];
  for (let i = 0; i < n; i++) {
    const env = pgStation(db.url, `station-${i}`, untilFile);
    const agent = await startAgent(env);
    stations.push({ env, agent, client: await connectAgent(testConfig(env).connectionFile, { client: 'pg-slot-failures' }) });
  }
  return stations;
}

async function closeStations(stations: Station[]): Promise<void> {
  for (const s of stations) {
    await s.client.close().catch(() => {});
    if (s.agent.child.exitCode === null && s.agent.child.signalCode === null) {
      s.agent.child.kill('SIGTERM');
      await new Promise((r) => s.agent.child.once('exit', r));
    }
  }
}

/** The run's process group once it runs (its wrapper's pid). */
async function runningPid(client: AgentClient, runId: string): Promise<number> {
  return waitFor(
    async () => {
      const run = (await client.listRuns(200)).find((r) => r.runId === runId);
      return run?.status === 'running' && run.pid !== null ? run.pid : null;
    },
    { what: `run ${runId} to run`, timeoutMs: 60_000, intervalMs: 50 },
  );
}

async function statusOf(client: AgentClient, runId: string): Promise<string | undefined> {
  return (await client.listRuns(200)).find((r) => r.runId === runId)?.status;
}

/** Over a window, the pool's locks never exceed `limit` (a bounded observation of an absence). */
async function neverAbove(observer: SlotObserver, limit: number, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const n = await observer.locks();
    assert.ok(n <= limit, `${n} slot locks held where at most ${limit} may be`);
  }
}

/** Runs `body` against `n` stations sharing a fresh PostgreSQL and an observer of its heavy-io locks, then closes them all. */
async function withStations(n: number, body: (stations: Station[], observer: SlotObserver) => Promise<void>): Promise<void> {
  const db = await startTestPostgres();
  const stations = await openStations(db, n);
  const observer = new SlotObserver(db.url, 'heavy-io');
  try {
    await observer.start();
    await body(stations, observer);
  } finally {
    await observer.stop();
    await closeStations(stations);
    await db.stop();
  }
}

test(
  'kill -9 of an agent: its fetchers keep their slots; once they are killed the slots free and another station gets one',
  { timeout: 180_000 },
  async () => {
    await withStations(2, async (stations, observer) => {
      const [a, b] = stations;
      const never = path.join(a.env.root, 'never');
      const held = await Promise.all([0, 1, 2].map(() => a.client.run('until-file', [never, '0'])));
      const groups = await Promise.all(held.map((r) => runningPid(a.client, r.runId)));
      const waiting = await b.client.run('until-file', [path.join(b.env.root, 'release'), '0']);
      await waitFor(async () => (await b.client.listRuns(50)).find((r) => r.runId === waiting.runId)?.wait?.kind === 'pool', {
        what: 'station 1 to wait for a slot',
        timeoutMs: 30_000,
      });

      const agentPid = a.agent.child.pid!;
      a.agent.child.kill('SIGKILL');
      // PostgreSQL has noticed the agent's death once its session is gone from pg_stat_activity.
      await waitFor(
        async () =>
          (
            await observer.query<{ n: string }>(
              "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'quantilica-agent station-0'",
            )
          ).rows[0].n === '0',
        { what: "the dead agent's session to end", timeoutMs: 30_000, intervalMs: 50 },
      );
      assert.ok(
        groups.every((g) => groupExists(g)),
        'the fetchers outlive their agent',
      );
      assert.equal(await observer.locks(), 3, 'their slots stay taken while they live');
      await neverAbove(observer, 3, 1000);
      assert.equal(await statusOf(b.client, waiting.runId), 'waiting', 'the other station does not get a slot of a live fetcher');

      for (const g of groups) process.kill(-g, 'SIGKILL');
      await waitFor(() => groups.every((g) => !groupExists(g)), { what: 'the fetchers to die', timeoutMs: 10_000 });
      await runningPid(b.client, waiting.runId);
      assert.ok(observer.maxLocks <= 3, `pg_locks showed ${observer.maxLocks} locks`);
      assert.ok(agentPid > 0);
      fs.writeFileSync(path.join(b.env.root, 'release'), '');
      assert.equal((await b.client.waitRun(waiting.runId)).status, 'completed');
    });
  },
);

test(
  "pg_terminate_backend on a slot's session: its keeper kills the run at once, then the slot goes to the next waiter",
  { timeout: 180_000 },
  async () => {
    await withStations(2, async (stations, observer) => {
      const [a, b] = stations;
      await observer.query('UPDATE core.pool SET slots = 1 WHERE name = $1', ['heavy-io']);
      const victim = await a.client.run('until-file', [path.join(a.env.root, 'never'), '0']);
      const group = await runningPid(a.client, victim.runId);
      const next = await b.client.run('until-file', [path.join(b.env.root, 'release'), '0']);
      await waitFor(async () => (await b.client.listRuns(50)).find((r) => r.runId === next.runId)?.wait?.kind === 'pool', {
        what: 'station 1 to wait',
        timeoutMs: 30_000,
      });
      const backend = await waitFor(
        async () =>
          (
            await observer.query<{ backend_pid: number }>('SELECT backend_pid FROM core.slot_holder WHERE run_id = $1 AND pid = $2', [
              victim.runId,
              group,
            ])
          ).rows[0]?.backend_pid,
        { what: 'the holder row of the run', timeoutMs: 10_000 },
      );
      await observer.query('SELECT pg_terminate_backend($1)', [backend]);

      const ended = await a.client.waitRun(victim.runId);
      assert.equal(ended.status, 'failed', 'the run whose slot was lost is stopped');
      assert.equal(ended.signal, 'SIGKILL');
      await runningPid(b.client, next.runId);
      assert.equal(groupExists(group), false, 'the first run is gone by the time the next one runs');
      assert.ok(observer.maxLocks <= 1, `pg_locks showed ${observer.maxLocks} locks in a 1-slot pool`);
      fs.writeFileSync(path.join(b.env.root, 'release'), '');
      assert.equal((await b.client.waitRun(next.runId)).status, 'completed');
    });
  },
);

test('resizing a pool in core.pool takes effect on every station without over-booking', { timeout: 180_000 }, async () => {
  await withStations(2, async (stations, observer) => {
    const [a, b] = stations;
    const release = (i: number) => path.join(a.env.root, `release-${i}`);
    const first = [
      await a.client.run('until-file', [release(0), '0']),
      await a.client.run('until-file', [release(1), '0']),
      await b.client.run('until-file', [release(2), '0']),
    ];
    await Promise.all(first.map((r, i) => runningPid(i < 2 ? a.client : b.client, r.runId)));
    assert.equal(await observer.locks(), 3);

    // The operator shrinks the pool to 1 while 3 run: nobody new starts until fewer than 1 hold.
    await observer.query('UPDATE core.pool SET slots = 1 WHERE name = $1', ['heavy-io']);
    const queued = (n: number) =>
      waitFor(async () => (await observer.query<{ n: string }>('SELECT count(*) AS n FROM core.slot_waiter')).rows[0].n === String(n), {
        what: `${n} tickets in the queue`,
        timeoutMs: 30_000,
      });
    const late = [await b.client.run('until-file', [release(3), '0'])];
    await queued(1);
    late.push(await a.client.run('until-file', [release(4), '0']));
    await queued(2);
    const lateClient = [b.client, a.client];
    fs.writeFileSync(release(0), '');
    fs.writeFileSync(release(2), '');
    await waitFor(async () => (await observer.locks()) === 1, { what: 'two of the three to end', timeoutMs: 30_000, intervalMs: 20 });
    await neverAbove(observer, 1, 1500);
    for (const [i, r] of late.entries()) assert.equal(await statusOf(lateClient[i], r.runId), 'waiting');

    // The last old holder ends: exactly one waiter (the first queued, on station 1) gets the one slot.
    fs.writeFileSync(release(1), '');
    await runningPid(b.client, late[0].runId);
    await neverAbove(observer, 1, 1500);
    assert.equal(await statusOf(a.client, late[1].runId), 'waiting');

    // Grown to 2: the other station's waiter starts, no agent restarted.
    await observer.query('UPDATE core.pool SET slots = 2 WHERE name = $1', ['heavy-io']);
    await runningPid(a.client, late[1].runId);
    assert.equal(await observer.locks(), 2);
    fs.writeFileSync(release(3), '');
    fs.writeFileSync(release(4), '');
    for (const [i, r] of late.entries()) assert.equal((await lateClient[i].waitRun(r.runId)).status, 'completed');
    assert.ok(observer.maxLocks <= 3, `pg_locks showed ${observer.maxLocks} locks`);
  });
});

test(
  "the agent's own connection lost: running fetchers go on, waiting runs queue again once it is back",
  { timeout: 180_000 },
  async () => {
    await withStations(1, async (stations, observer) => {
      const [a] = stations;
      await observer.query('UPDATE core.pool SET slots = 1 WHERE name = $1', ['heavy-io']);
      const release = (i: number) => path.join(a.env.root, `release-${i}`);
      const running = await a.client.run('until-file', [release(0), '0']);
      const group = await runningPid(a.client, running.runId);
      const waiting = await a.client.run('until-file', [release(1), '0']);
      const agentSession = async () =>
        (
          await observer.query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE application_name = 'quantilica-agent station-0'")
        ).rows.map((r) => r.pid);
      await waitFor(async () => (await observer.query<{ n: string }>('SELECT count(*) AS n FROM core.slot_waiter')).rows[0].n === '1', {
        what: "the waiting run's ticket",
        timeoutMs: 30_000,
      });
      const [before] = await agentSession();
      await observer.query('SELECT pg_terminate_backend($1)', [before]);
      // The agent reconnects (a new session) and its waiting run takes a new ticket on it.
      await waitFor(
        async () => {
          const now = await agentSession();
          return now.length === 1 && now[0] !== before;
        },
        { what: 'the agent to reconnect', timeoutMs: 30_000, intervalMs: 50 },
      );
      await waitFor(
        async () =>
          (
            await observer.query<{ n: string }>(`SELECT count(*) AS n FROM core.slot_waiter w
      WHERE EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = w.backend_pid)`)
          ).rows[0].n === '1',
        { what: 'a live ticket again', timeoutMs: 30_000 },
      );
      assert.ok(groupExists(group), 'the running fetcher was not touched');
      assert.equal(await statusOf(a.client, running.runId), 'running');
      assert.equal(await statusOf(a.client, waiting.runId), 'waiting');
      fs.writeFileSync(release(0), '');
      await runningPid(a.client, waiting.runId);
      fs.writeFileSync(release(1), '');
      assert.equal((await a.client.waitRun(running.runId)).status, 'completed');
      assert.equal((await a.client.waitRun(waiting.runId)).status, 'completed');
      assert.ok(observer.maxLocks <= 1, `pg_locks showed ${observer.maxLocks} locks in a 1-slot pool`);
    });
  },
);
