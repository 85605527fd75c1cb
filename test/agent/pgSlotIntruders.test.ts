import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import pg from 'pg';
import type { Snapshot } from '../../shared/protocol';
import { connectAgent, type AgentClient } from '../../agent/client/agentClient';
import { FIXTURES, runCli, startAgent, testConfig, type FetcherSpec, type TestEnv } from '../support/harness';
import { startTestPostgres, type TestPostgres } from '../support/postgres';
import { pgStation, SlotObserver } from '../support/pgStations';
import { waitFor } from '../support/waitFor';

// What reaches the slot database from outside the stations' role: a role with no grants that may
// connect (PUBLIC has CONNECT on a new database) takes advisory locks on the pools' keys, and a user of
// another station sharing the role writes a core.slot_holder row numbered far beyond any pool.

const fetchers: FetcherSpec[] = [
  { name: 'heavy', pool: 'heavy-io', argv: [path.join(FIXTURES, 'exitWhenFileExists.sh')] },
  { name: 'light', pool: 'network-light', argv: [path.join(FIXTURES, 'exitWhenFileExists.sh')] },
];

interface Bed {
  db: TestPostgres;
  env: TestEnv;
  agent: Awaited<ReturnType<typeof startAgent>>;
  client: AgentClient;
  observer: SlotObserver;
}

async function withAgent(body: (bed: Bed) => Promise<void>): Promise<void> {
  const db = await startTestPostgres();
  const env = pgStation(db.url, 'station-a', fetchers);
  const observer = new SlotObserver(db.url, 'heavy-io');
  let agent: Bed['agent'] | null = null;
  let client: AgentClient | null = null;
  try {
    agent = await startAgent(env);
    client = await connectAgent(testConfig(env).connectionFile, { client: 'pg-slot-intruders' });
    await observer.start();
    await body({ db, env, agent, client, observer });
  } finally {
    await client?.close().catch(() => {});
    if (agent && agent.child.exitCode === null && agent.child.signalCode === null) {
      agent.child.kill('SIGTERM');
      await new Promise((r) => agent!.child.once('exit', r));
    }
    await observer.stop();
    await db.stop();
  }
}

async function runningRun(client: AgentClient, runId: string): Promise<number> {
  return waitFor(
    async () => {
      const run = (await client.listRuns(50)).find((r) => r.runId === runId);
      return run?.status === 'running' ? run.slot : null;
    },
    { what: `run ${runId} to run`, timeoutMs: 60_000, intervalMs: 50 },
  );
}

test(
  "a role with no grants holding advisory locks on the pools' keys neither blocks nor crashes them; status warns that PUBLIC may connect",
  { timeout: 180_000 },
  async () => {
    await withAgent(async ({ db, env, agent, client, observer }) => {
      // Roles belong to the whole server (also a shared QUANTILICA_TEST_DATABASE_URL one): a fresh name, dropped at the end.
      const role = `quantilica_intruder_${crypto.randomBytes(4).toString('hex')}`;
      const password = crypto.randomBytes(12).toString('hex');
      await observer.query(`CREATE ROLE ${role} LOGIN PASSWORD '${password}'`);
      const url = new URL(db.url);
      url.username = role;
      url.password = password;
      const intruder = new pg.Client({ connectionString: url.toString() });
      intruder.on('error', () => {});
      try {
        await intruder.connect();
        const keys = Object.fromEntries(
          (await observer.query<{ name: string; lock_key: number }>('SELECT name, lock_key FROM core.pool')).rows.map((r) => [
            r.name,
            r.lock_key,
          ]),
        );
        const heavy = keys['heavy-io'];
        const light = keys['network-light'];
        // Every slot number of the 3-slot heavy-io pool, and an objid (4294967295) no integer can hold.
        await intruder.query('SELECT pg_advisory_lock($1, 0), pg_advisory_lock($1, 1), pg_advisory_lock($1, 2), pg_advisory_lock($2, -1)', [
          heavy,
          light,
        ]);
        assert.equal(
          (
            await observer.query<{ n: string }>(
              `SELECT count(*) AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.locktype = 'advisory' AND a.usename = $1`,
              [role],
            )
          ).rows[0].n,
          '4',
          'the intruder holds its four locks',
        );

        const release = path.join(env.root, 'release');
        const heavyRuns = await Promise.all([0, 1, 2].map(() => client.run('heavy', [release, '0'])));
        const lightRun = await client.run('light', [release, '0']);
        const slots = await Promise.all(heavyRuns.map((r) => runningRun(client, r.runId)));
        await runningRun(client, lightRun.runId);
        assert.equal(new Set(slots).size, 3, 'three distinct slots');
        for (const s of slots) assert.ok(s >= 3, `slot ${s} is a number the intruder does not hold`);
        // Our role's locks on heavy-io: exactly the pool's 3, never more because some numbers were taken.
        const ours = async () =>
          Number(
            (
              await observer.query<{ n: string }>(
                `SELECT count(*) AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.classid = $1::oid AND a.usename = current_user`,
                [heavy],
              )
            ).rows[0].n,
          );
        assert.equal(await ours(), 3);
        // A fourth heavy run waits: the intruder's locks do not make the pool bigger either.
        const fourth = await client.run('heavy', [release, '0']);
        await waitFor(async () => (await client.listRuns(50)).find((r) => r.runId === fourth.runId)?.wait?.kind === 'pool', {
          what: 'the fourth run to wait for a slot',
          timeoutMs: 30_000,
        });
        assert.equal(await ours(), 3);

        // The holders' copy a status shows is refreshed every second: it shows the three once it has read them.
        const snapshot: Snapshot = await waitFor(
          async () => {
            const s = await client.getSnapshot();
            return s.pools.find((p) => p.name === 'heavy-io')!.used === 3 ? s : null;
          },
          { what: 'status to show the three holders', timeoutMs: 30_000, intervalMs: 50 },
        );
        assert.deepEqual(
          snapshot.pools
            .find((p) => p.name === 'heavy-io')!
            .slots.filter((s) => s.holder !== null)
            .map((s) => s.index)
            .sort(),
          [...slots].sort(),
        );
        assert.deepEqual(snapshot.agent.slotBackend, { state: 'ok', error: null, publicConnect: true });
        const status = await runCli(env, ['status']);
        assert.equal(status.code, 0, status.stderr);
        assert.match(status.stdout, /slot database: reachable/);
        assert.match(status.stdout, /slot database: WARNING any role may connect \(PUBLIC has CONNECT\).*REVOKE CONNECT ON DATABASE/);
        assert.match(agent.stderr(), /any role may connect to the slot database \(PUBLIC has CONNECT\)/, 'said at start too');

        fs.writeFileSync(release, '');
        for (const r of [...heavyRuns, lightRun, fourth]) assert.equal((await client.waitRun(r.runId)).status, 'completed');
        assert.doesNotMatch(agent.stderr(), /out of range/);
        assert.ok(observer.maxLocks <= 3 + 3, `pg_locks showed ${observer.maxLocks} heavy-io locks (3 of ours at most, 3 of the intruder)`);

        // With CONNECT revoked from PUBLIC the warning is gone (a CLI of another station reads it afresh).
        await observer.query(`REVOKE CONNECT ON DATABASE ${new URL(db.url).pathname.slice(1)} FROM PUBLIC`);
        const other = pgStation(db.url, 'station-b', fetchers);
        const after = await runCli(other, ['status', '--json']);
        assert.equal(after.code, 0, after.stderr);
        assert.deepEqual((JSON.parse(after.stdout) as Snapshot).agent.slotBackend, { state: 'ok', error: null, publicConnect: false });
      } finally {
        await intruder.end().catch(() => {});
        await waitFor(
          async () =>
            (await observer.query<{ n: string }>('SELECT count(*) AS n FROM pg_stat_activity WHERE usename = $1', [role])).rows[0].n ===
            '0',
          { what: "the intruder's session to end", timeoutMs: 30_000 },
        );
        await observer.query(`DROP ROLE ${role}`);
      }
    });
  },
);

test('a core.slot_holder row numbered 2147483647 is ignored and logged once; status answers at once', { timeout: 180_000 }, async (t) => {
  await withAgent(async ({ env, agent, client, observer }) => {
    // Written by a user of another station sharing the role, on a live session (rows of dead ones are ignored anyway).
    await observer.query(`INSERT INTO core.slot_holder (pool, slot, station, keeper_pid, run_id, backend_pid)
      VALUES ('heavy-io', 2147483647, 'station-x', 1, 'x', pg_backend_pid())`);
    await waitFor(() => /ignored a core.slot_holder row numbered beyond any pool's size/.test(agent.stderr()), {
      what: 'the agent to read and ignore the row',
      timeoutMs: 30_000,
    });
    let slowest = 0;
    const answers = async () => {
      const began = Date.now();
      const snapshot = await client.getSnapshot();
      const took = Date.now() - began;
      slowest = Math.max(slowest, took);
      // A hang check: the unfixed agent builds an array of 2^31 slots and never answers. Bounded generously for a loaded machine.
      assert.ok(took < 2000, `status took ${took} ms`);
      const pool = snapshot.pools.find((p) => p.name === 'heavy-io')!;
      assert.equal(pool.slots.length, 3, 'the row adds no slot');
      return pool;
    };
    assert.equal((await answers()).used, 0);
    // Two later refreshes of the holders' copy, each seen by a change it brings: a plausible row of the
    // same station comes, then goes. The odd row is still ignored, and was logged only once.
    const insert =
      "INSERT INTO core.slot_holder (pool, slot, station, keeper_pid, run_id, backend_pid) VALUES ('heavy-io', 1, 'station-x', 1, 'y', pg_backend_pid())";
    await observer.query(insert);
    await waitFor(async () => (await answers()).slots[1].holder?.station === 'station-x', {
      what: 'a refresh that shows the plausible row',
      timeoutMs: 30_000,
      intervalMs: 50,
    });
    await observer.query('DELETE FROM core.slot_holder WHERE slot = 1');
    await waitFor(async () => (await answers()).used === 0, { what: 'a refresh without it', timeoutMs: 30_000, intervalMs: 50 });
    assert.equal(agent.stderr().match(/ignored a core.slot_holder row/g)?.length, 1, 'logged once');
    t.diagnostic(`status over the protocol answered in at most ${slowest} ms with the row in place`);
    const status = await runCli(env, ['status']);
    assert.equal(status.code, 0, status.stderr);
    assert.doesNotMatch(status.stdout, /2147483647/);
    // The pool still works.
    const release = path.join(env.root, 'release');
    fs.writeFileSync(release, '');
    assert.equal((await client.waitRun((await client.run('heavy', [release, '0'])).runId)).status, 'completed');
  });
});
