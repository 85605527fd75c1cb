import type { Migration } from '../../db/migration';

/** MAX_POOL_SLOTS of pgSlotSql.ts as this migration was released (core.pool's CHECK): a released migration never changes. */
const MAX_POOL_SLOTS = 256;

/**
 * A pool's advisory locks as pg_locks shows them (as POOL_STATE in pgSlotSql.ts reads them): two-int
 * form, classid = lock_key, objid = slot. Any role that may connect can take advisory locks on any key,
 * so only sessions of our own role (the stations' role) count as holders; a lock of another role only
 * makes its number skipped. A session not (yet) in pg_stat_activity counts as ours: over-counting only
 * delays a grant. objid is an oid (unsigned 32 bits): compared as bigint before it is an integer.
 */
const LOCKS = `SELECT l.objid::bigint::integer AS slot, (a.usename IS NULL OR a.usename = session_user) AS own
      FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
      WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = v_key::oid
        AND l.objid::bigint < ${MAX_POOL_SLOTS}
        AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())`;

// A keeper's take in one round trip: the pool's row and locks, a try on each free number, the count
// again under the lock, the holder row. Four statements from the keeper were four wake-ups of the
// server's backend and of the keeper, most of an acquire's time on a loaded station.
export const migration006: Migration = {
  version: 6,
  name: 'take_slot',
  sql: `
CREATE FUNCTION core.take_slot(p_pool text, p_station text, p_keeper_pid integer, p_run_id text) RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_slots integer;
  v_key integer;
  v_held integer[];
  v_blocked integer[];
  v_n integer;
BEGIN
  SELECT p.slots, p.lock_key INTO v_slots, v_key FROM core.pool p WHERE p.name = p_pool;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'pool % is not in core.pool', p_pool USING ERRCODE = 'no_data_found';
  END IF;
  SELECT coalesce(array_agg(s.slot) FILTER (WHERE s.own), '{}'), coalesce(array_agg(s.slot) FILTER (WHERE NOT s.own), '{}')
    INTO v_held, v_blocked FROM (${LOCKS}) s;
  IF cardinality(v_held) >= v_slots THEN
    RETURN NULL;
  END IF;
  -- The pool's numbers: the first v_slots that no other role's lock blocks.
  FOR v_n IN SELECT g.n FROM generate_series(0, ${MAX_POOL_SLOTS - 1}) g(n) WHERE g.n <> ALL (v_blocked) ORDER BY g.n LIMIT v_slots LOOP
    CONTINUE WHEN v_n = ANY (v_held) OR NOT pg_try_advisory_lock(v_key, v_n);
    -- Under the lock: count again (another station may have taken a slot meanwhile, or the pool shrunk).
    SELECT p.slots INTO v_slots FROM core.pool p WHERE p.name = p_pool;
    IF (SELECT count(*) FROM (${LOCKS}) s WHERE s.own) > coalesce(v_slots, 0) THEN
      PERFORM pg_advisory_unlock(v_key, v_n);
      RETURN NULL;
    END IF;
    BEGIN
      INSERT INTO core.slot_holder (pool, slot, station, keeper_pid, run_id, backend_pid)
      VALUES (p_pool, v_n, p_station, p_keeper_pid, p_run_id, pg_backend_pid())
      ON CONFLICT (pool, slot) DO UPDATE SET station = EXCLUDED.station, keeper_pid = EXCLUDED.keeper_pid, pid = NULL,
        run_id = EXCLUDED.run_id, fetcher = NULL, since = now(), backend_pid = EXCLUDED.backend_pid;
    EXCEPTION WHEN OTHERS THEN
      -- A session-level lock outlives the error: give it back, so a failed take holds nothing.
      PERFORM pg_advisory_unlock(v_key, v_n);
      RAISE;
    END;
    RETURN v_n;
  END LOOP;
  RETURN NULL;
END
$$;
`,
};
