import type pg from 'pg';

// The SQL of the postgres slot backend, shared by the agent (pgSlotBackend.ts) and the lock
// keepers (pgSlotKeeper.ts). Every name is schema-qualified: the connections pin search_path.

/**
 * The most slots a pool may have (core.pool's CHECK): slot numbers are below it. An advisory lock or a
 * holder row numbered outside [0, MAX_POOL_SLOTS) is nobody's slot.
 */
export const MAX_POOL_SLOTS = 256;

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
  const row = (await client.query<{ slots: number; lock_key: number }>('SELECT slots, lock_key FROM core.pool WHERE name = $1', [name]))
    .rows[0];
  if (!row) throw new Error(`pool ${name} is not in core.pool`);
  return { slots: row.slots, lockKey: row.lock_key };
}

/** A pool's row, its locks and its live queue of tickets, read in one statement. */
export interface PoolState extends PoolRow {
  /**
   * Slot numbers held by sessions of our role (any station): what counts against the pool's size. A
   * lock of another role only makes core.take_slot skip its number.
   */
  held: number[];
  /** Tickets of waiters whose session lives, in queue order. */
  queue: string[];
  /** The tickets the same statement gave the newcomers, by run id. */
  tickets: Map<string, string>;
}

/** Waiters of this agent that need a ticket: their run ids, in the order they came. */
export interface Newcomers {
  station: string;
  agentPid: number;
  runIds: readonly string[];
}

// One round trip instead of four (the newcomers' tickets, the pool's row, its locks, its queue): under
// load each round trip is a wake-up of the server's backend and of this process, and an acquire's
// latency is mostly those. The locks are read as core.take_slot reads them (migrations/006_take_slot.ts
// says why so). The new tickets are not in the statement's snapshot of the queue: they come after it,
// in their order (nobody's ticket can be newer and already seen). A pool not in core.pool gets none.
const POOL_STATE = `WITH p AS (SELECT slots, lock_key FROM core.pool WHERE name = $1),
  l AS (SELECT l.objid::bigint AS slot
    FROM p, pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = p.lock_key::integer::oid
      AND l.objid::bigint < ${MAX_POOL_SLOTS}
      AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
      AND (a.usename IS NULL OR a.usename = session_user)),
  t AS (INSERT INTO core.slot_waiter (pool, station, agent_pid, run_id, backend_pid)
    SELECT $1, $2, $3, u.run_id, pg_catalog.pg_backend_pid() FROM unnest($4::text[]) WITH ORDINALITY AS u(run_id, i)
    WHERE EXISTS (SELECT 1 FROM p) ORDER BY u.i
    RETURNING ticket, run_id)
  SELECT p.slots, p.lock_key,
    coalesce((SELECT array_agg(l.slot::text) FROM l), '{}') AS held,
    coalesce((SELECT array_agg(w.ticket::text ORDER BY w.ticket) FROM core.slot_waiter w WHERE w.pool = $1
      AND EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid = w.backend_pid)), '{}') AS queue,
    coalesce((SELECT array_agg(t.ticket::text ORDER BY t.ticket) FROM t), '{}') AS new_tickets,
    coalesce((SELECT array_agg(t.run_id ORDER BY t.ticket) FROM t), '{}') AS new_runs
  FROM p`;

/** Tickets for the newcomers, then the pool's row, locks and live queue, in one statement. */
export async function poolState(client: pg.ClientBase, name: string, newcomers: Newcomers): Promise<PoolState> {
  const row = (
    await client.query<{
      slots: number;
      lock_key: number;
      held: string[];
      queue: string[];
      new_tickets: string[];
      new_runs: string[];
    }>(POOL_STATE, [name, newcomers.station, newcomers.agentPid, newcomers.runIds])
  ).rows[0];
  if (!row) throw new Error(`pool ${name} is not in core.pool`);
  return {
    slots: row.slots,
    lockKey: row.lock_key,
    held: row.held.map(Number),
    queue: [...row.queue, ...row.new_tickets],
    tickets: new Map(row.new_runs.map((runId, i) => [runId, row.new_tickets[i]])),
  };
}

/** Rows of sessions that are gone: their locks died with them, their rows only mislead a reader. */
export async function cleanDeadRows(client: pg.ClientBase): Promise<void> {
  await client.query(
    'DELETE FROM core.slot_waiter w WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid = w.backend_pid)',
  );
  await client.query(
    'DELETE FROM core.slot_holder h WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid = h.backend_pid)',
  );
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
  const rows = (
    await client.query<{
      pool: string;
      slot: number;
      station: string;
      keeper_pid: number;
      pid: number | null;
      run_id: string | null;
      fetcher: string | null;
      since: Date;
    }>(
      `SELECT h.pool, h.slot, h.station, h.keeper_pid, h.pid, h.run_id, h.fetcher, h.since FROM core.slot_holder h
      WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid = h.backend_pid) ORDER BY h.pool, h.slot`,
    )
  ).rows;
  return rows.map((r) => ({
    pool: r.pool,
    slot: r.slot,
    station: r.station,
    keeperPid: r.keeper_pid,
    pid: r.pid,
    runId: r.run_id,
    fetcher: r.fetcher,
    since: r.since.toISOString(),
  }));
}
