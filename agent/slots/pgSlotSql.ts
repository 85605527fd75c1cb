import type pg from 'pg';

// Issue 14: the SQL of the postgres slot backend, shared by the agent (pgSlotBackend.ts) and the lock
// keepers (pgSlotKeeper.ts). Every name is schema-qualified: the connections pin search_path.

/** Advisory locks of a pool as pg_locks shows them: two-int form, classid = lock_key, objid = slot. */
const HELD_SLOTS = `SELECT l.objid::bigint::integer AS slot FROM pg_catalog.pg_locks l
  WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = $1::integer::oid
    AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())`;

export interface PoolRow {
  slots: number;
  lockKey: number;
}

/** The pool's shared row, made from this station's default the first time any station uses it. */
export async function ensurePool(client: pg.ClientBase, name: string, defaultSlots: number): Promise<PoolRow> {
  await client.query('INSERT INTO core.pool (name, slots) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING', [name, defaultSlots]);
  return readPool(client, name);
}

export async function readPool(client: pg.ClientBase, name: string): Promise<PoolRow> {
  const row = (await client.query<{ slots: number; lock_key: number }>('SELECT slots, lock_key FROM core.pool WHERE name = $1', [name])).rows[0];
  if (!row) throw new Error(`pool ${name} is not in core.pool`);
  return { slots: row.slots, lockKey: row.lock_key };
}

/** Slot numbers whose advisory lock some session holds now (any station). */
export async function heldSlots(client: pg.ClientBase, lockKey: number): Promise<number[]> {
  return (await client.query<{ slot: number }>(HELD_SLOTS, [lockKey])).rows.map((r) => r.slot);
}

/** How many live tickets of the pool are ahead of `ticket` (the waiters of dead sessions do not count). */
export async function ticketsAhead(client: pg.ClientBase, pool: string, ticket: string): Promise<number> {
  const row = (await client.query<{ n: string }>(`SELECT count(*) AS n FROM core.slot_waiter w
    WHERE w.pool = $1 AND w.ticket < $2::bigint
      AND EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid = w.backend_pid)`, [pool, ticket])).rows[0];
  return Number(row?.n ?? 0);
}

/** Rows of sessions that are gone: their locks died with them, their rows only mislead a reader. */
export async function cleanDeadRows(client: pg.ClientBase): Promise<void> {
  await client.query('DELETE FROM core.slot_waiter w WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid = w.backend_pid)');
  await client.query('DELETE FROM core.slot_holder h WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid = h.backend_pid)');
}

export interface HolderRow {
  pool: string;
  slot: number;
  station: string;
  keeperPid: number;
  pid: number | null;
  runId: string | null;
  fetcher: string | null;
  since: string;
}

/** Holders whose session lives (all stations, all pools). */
export async function liveHolders(client: pg.ClientBase): Promise<HolderRow[]> {
  const rows = (await client.query<{ pool: string; slot: number; station: string; keeper_pid: number; pid: number | null; run_id: string | null; fetcher: string | null; since: Date }>(
    `SELECT h.pool, h.slot, h.station, h.keeper_pid, h.pid, h.run_id, h.fetcher, h.since FROM core.slot_holder h
      WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid = h.backend_pid) ORDER BY h.pool, h.slot`)).rows;
  return rows.map((r) => ({ pool: r.pool, slot: r.slot, station: r.station, keeperPid: r.keeper_pid, pid: r.pid, runId: r.run_id, fetcher: r.fetcher, since: r.since.toISOString() }));
}
