import type pg from 'pg';

// The SQL of the postgres slot backend, shared by the agent (pgSlotBackend.ts) and the lock
// keepers (pgSlotKeeper.ts). Every name is schema-qualified: the connections pin search_path.

/**
 * The most slots a pool may have (core.pool's CHECK): slot numbers are below it. An advisory lock or a
 * holder row numbered outside [0, MAX_POOL_SLOTS) is nobody's slot.
 */
export const MAX_POOL_SLOTS = 256;

/**
 * Advisory locks of a pool as pg_locks shows them: two-int form, classid = lock_key, objid = slot.
 * Any role that may connect can take advisory locks on any key, so only sessions of our own role (the
 * stations' role) count as holders; a lock of another role is reported as such, so its slot number is
 * skipped without being counted. A session not (yet) in pg_stat_activity counts as ours: over-counting
 * only delays a grant. objid is an oid (unsigned 32 bits): read as bigint, never as integer.
 */
const HELD_SLOTS = `SELECT l.objid::bigint AS slot, (a.usename IS NULL OR a.usename = session_user) AS own
  FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
  WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = $1::integer::oid
    AND l.objid::bigint < ${MAX_POOL_SLOTS}
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
  const row = (await client.query<{ slots: number; lock_key: number }>('SELECT slots, lock_key FROM core.pool WHERE name = $1', [name]))
    .rows[0];
  if (!row) throw new Error(`pool ${name} is not in core.pool`);
  return { slots: row.slots, lockKey: row.lock_key };
}

/** A pool's advisory locks now: the slots our role's sessions hold, and the numbers other roles block. */
export interface PoolLocks {
  /** Slot numbers held by sessions of our role (any station): what counts against the pool's size. */
  held: number[];
  /** Slot numbers another role's session holds a lock on: not a slot of ours, but no keeper can take them. */
  blocked: number[];
}

/** A pool's row, its locks and (for the agent) its live queue of tickets, read in one statement. */
export interface PoolState extends PoolRow, PoolLocks {
  /** Tickets of waiters whose session lives, in queue order. */
  queue: string[];
}

// One round trip instead of three: under load each round trip is a wake-up of the server's backend and
// of this process, and an acquire's latency is mostly those.
const POOL_STATE = `WITH p AS (SELECT slots, lock_key FROM core.pool WHERE name = $1),
  l AS (SELECT l.objid::bigint AS slot, (a.usename IS NULL OR a.usename = session_user) AS own
    FROM p, pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = p.lock_key::integer::oid
      AND l.objid::bigint < ${MAX_POOL_SLOTS}
      AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()))
  SELECT p.slots, p.lock_key,
    coalesce((SELECT array_agg(l.slot::text) FROM l WHERE l.own), '{}') AS held,
    coalesce((SELECT array_agg(l.slot::text) FROM l WHERE NOT l.own), '{}') AS blocked,
    CASE WHEN $2::boolean THEN coalesce((SELECT array_agg(w.ticket::text ORDER BY w.ticket) FROM core.slot_waiter w WHERE w.pool = $1
      AND EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid = w.backend_pid)), '{}') ELSE '{}' END AS queue
  FROM p`;

/** The pool's row and locks in one statement; with `withQueue`, also its live queue of tickets. */
export async function poolState(client: pg.ClientBase, name: string, withQueue = false): Promise<PoolState> {
  const row = (
    await client.query<{ slots: number; lock_key: number; held: string[]; blocked: string[]; queue: string[] }>(POOL_STATE, [
      name,
      withQueue,
    ])
  ).rows[0];
  if (!row) throw new Error(`pool ${name} is not in core.pool`);
  return {
    slots: row.slots,
    lockKey: row.lock_key,
    held: row.held.map(Number),
    blocked: row.blocked.map(Number),
    queue: row.queue,
  };
}

export async function poolLocks(client: pg.ClientBase, lockKey: number): Promise<PoolLocks> {
  const rows = (await client.query<{ slot: string; own: boolean }>(HELD_SLOTS, [lockKey])).rows;
  return { held: rows.filter((r) => r.own).map((r) => Number(r.slot)), blocked: rows.filter((r) => !r.own).map((r) => Number(r.slot)) };
}

/** Slot numbers whose advisory lock a session of our role holds now (any station). */
export async function heldSlots(client: pg.ClientBase, lockKey: number): Promise<number[]> {
  return (await poolLocks(client, lockKey)).held;
}

/**
 * The numbers a pool of `slots` slots uses: the first `slots` in [0, MAX_POOL_SLOTS) that no other
 * role blocks, so a foreign lock on slot 0 moves a slot to the next free number instead of taking it.
 */
export function slotNumbers(slots: number, blocked: readonly number[]): number[] {
  const skip = new Set(blocked);
  const out: number[] = [];
  for (let n = 0; n < MAX_POOL_SLOTS && out.length < slots; n++) if (!skip.has(n)) out.push(n);
  return out;
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
