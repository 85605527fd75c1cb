import type { Migration } from '../../db/migration';

// The postgres slot backend (agent/slots/pgSlotPool.ts). A slot is a session advisory lock
// pg_try_advisory_lock(pool.lock_key, slot); these tables only say how many slots a pool has, who waits
// in which order, and who holds what (for display). The locks are the truth; a row whose backend is no
// longer in pg_stat_activity is dead and is ignored, then cleaned.
export const migration003: Migration = {
  version: 3,
  name: 'slot_backend',
  sql: `
-- Slot counts shared by every station: an operator changes them here, in one place.
CREATE TABLE core.pool (
  name text COLLATE "C" PRIMARY KEY,
  slots integer NOT NULL CHECK (slots BETWEEN 0 AND 256),
  -- The first key of the two-int advisory lock; pg_locks shows it as classid (objid = slot, objsubid = 2).
  lock_key integer NOT NULL UNIQUE GENERATED ALWAYS AS IDENTITY (START WITH 1365),
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- Waiting runs of every station, served by ticket order (a fair queue across stations).
CREATE TABLE core.slot_waiter (
  ticket bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  pool text COLLATE "C" NOT NULL,
  station text NOT NULL,
  agent_pid integer NOT NULL,
  run_id text COLLATE "C" NOT NULL,
  backend_pid integer NOT NULL,
  enqueued_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX slot_waiter_pool_idx ON core.slot_waiter (pool, ticket);

-- Who holds which slot, written by the session that holds the lock (its lock keeper).
CREATE TABLE core.slot_holder (
  pool text COLLATE "C" NOT NULL,
  slot integer NOT NULL,
  station text NOT NULL,
  keeper_pid integer NOT NULL,
  pid integer,
  run_id text COLLATE "C",
  fetcher text,
  since timestamptz NOT NULL DEFAULT now(),
  backend_pid integer NOT NULL,
  PRIMARY KEY (pool, slot)
);
`,
};
