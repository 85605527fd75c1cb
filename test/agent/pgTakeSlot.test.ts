import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import pg from 'pg';
import { migrate } from '../../agent/db/migrate';
import { ensurePool, poolState } from '../../agent/slots/pgSlotSql';
import { memoryLogger } from '../support/memoryLogger';
import { startTestPostgres } from '../support/postgres';

// The keeper's take and the agent's look at the queue, each one statement on the server: what they do
// with a pool that is not there, and that a take failing after its lock holds nothing.

const advisoryLocksOf = async (observer: pg.Client, pid: number) =>
  Number(
    (await observer.query<{ n: string }>(`SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = $1`, [pid])).rows[0].n,
  );

test('core.take_slot: an unknown pool is an error; a holder row that cannot be written gives the lock back; a full pool is null', async () => {
  const db = await startTestPostgres();
  const taker = new pg.Client({ connectionString: db.url });
  const observer = new pg.Client({ connectionString: db.url });
  try {
    await taker.connect();
    await observer.connect();
    await migrate(observer, memoryLogger());
    await ensurePool(observer, 'heavy-io', 2);
    const pid = Number((await taker.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0].pid);
    const take = (pool: string) =>
      taker.query<{ slot: number | null }>('SELECT core.take_slot($1, $2, $3, $4) AS slot', [pool, 'station-a', 4242, `run-${pool}`]);

    await assert.rejects(take('no-such-pool'), /pool no-such-pool is not in core\.pool/);
    assert.equal(await advisoryLocksOf(observer, pid), 0);

    // The holder row fails (as a full disk or a lost privilege would make it fail): no lock is left.
    await observer.query(`CREATE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$`);
    await observer.query('CREATE TRIGGER refuse BEFORE INSERT ON core.slot_holder FOR EACH ROW EXECUTE FUNCTION public.refuse()');
    await assert.rejects(take('heavy-io'), /refused/);
    assert.equal(await advisoryLocksOf(observer, pid), 0, 'the failed take holds no lock');
    await observer.query('DROP TRIGGER refuse ON core.slot_holder');

    assert.equal((await take('heavy-io')).rows[0].slot, 0);
    assert.equal((await take('heavy-io')).rows[0].slot, 1);
    assert.equal((await take('heavy-io')).rows[0].slot, null, 'a full pool');
    assert.equal(await advisoryLocksOf(observer, pid), 2);
    const holders = await observer.query('SELECT slot, run_id FROM core.slot_holder ORDER BY slot');
    assert.deepEqual(holders.rows, [
      { slot: 0, run_id: 'run-heavy-io' },
      { slot: 1, run_id: 'run-heavy-io' },
    ]);
  } finally {
    await taker.end().catch(() => {});
    await observer.end().catch(() => {});
    await db.stop();
  }
});

test('the queue statement: newcomers get tickets after everyone already queued, in their order; an unknown pool gets none', async () => {
  const db = await startTestPostgres();
  const agent = new pg.Client({ connectionString: db.url });
  try {
    await agent.connect();
    await migrate(agent, memoryLogger());
    await ensurePool(agent, 'cpu-analysis', 2);
    const who = { station: 'station-a', agentPid: 4242 };
    const first = await poolState(agent, 'cpu-analysis', { ...who, runIds: ['a', 'b'] });
    assert.deepEqual([...first.tickets.keys()], ['a', 'b']);
    assert.deepEqual(first.queue, [first.tickets.get('a'), first.tickets.get('b')]);
    const second = await poolState(agent, 'cpu-analysis', { ...who, runIds: ['c'] });
    assert.deepEqual(second.queue, [...first.queue, second.tickets.get('c')], 'the newcomer after those already queued');
    assert.ok(Number(second.tickets.get('c')) > Number(first.tickets.get('b')));
    assert.deepEqual(second.held, []);

    await assert.rejects(poolState(agent, 'no-such-pool', { ...who, runIds: ['d'] }), /pool no-such-pool is not in core\.pool/);
    const left = await agent.query<{ n: number }>(`SELECT count(*)::int AS n FROM core.slot_waiter WHERE run_id = 'd'`);
    assert.equal(left.rows[0].n, 0, 'no ticket for a pool that is not there');
  } finally {
    await agent.end().catch(() => {});
    await db.stop();
  }
});
