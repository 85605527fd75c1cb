import type { Migration } from '../../db/migration';

// SQL as a string constant: esbuild bundles the agent into one file, so there is no .sql beside it.
export const migration001: Migration = {
  version: 1,
  name: 'core_telemetry',
  sql: `
CREATE SCHEMA IF NOT EXISTS core;

-- Payload readers that never fail: a malformed payload must not poison the batch that carries it.
CREATE FUNCTION core.jsonb_int(value jsonb) RETURNS integer LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN jsonb_typeof(value) = 'number' AND (value #>> '{}')::numeric BETWEEN -2147483648 AND 2147483647
    THEN round((value #>> '{}')::numeric)::integer END
$$;
CREATE FUNCTION core.jsonb_num(value jsonb) RETURNS double precision LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN jsonb_typeof(value) = 'number' THEN (value #>> '{}')::double precision END
$$;
CREATE FUNCTION core.jsonb_text(value jsonb) RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN jsonb_typeof(value) IN ('string', 'number', 'boolean') THEN value #>> '{}' END
$$;

-- One row per run, folded from its events. status only moves forward: (status_rank, status_at) of the
-- row is compared with the incoming one, so a late heartbeat never overwrites a finish.
-- Ids compare bytewise (COLLATE "C"): they are opaque, and locale-aware comparison made every index
-- insertion of the flush markedly slower.
CREATE TABLE core.task_run (
  run_id text COLLATE "C" PRIMARY KEY,
  task text,
  pool text,
  status text NOT NULL DEFAULT 'unknown',
  status_rank smallint NOT NULL DEFAULT 0,
  status_at timestamptz NOT NULL DEFAULT '-infinity',
  exit_code integer,
  signal text,
  reason text,
  started_at timestamptz,
  finished_at timestamptz,
  duration_seconds double precision,
  last_heartbeat_at timestamptz,
  last_event_at timestamptz,
  event_count bigint NOT NULL DEFAULT 0,
  slot integer,
  argv jsonb,
  host text,
  pid integer,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX task_run_task_started_idx ON core.task_run (task, started_at DESC);
CREATE INDEX task_run_status_idx ON core.task_run (status) WHERE status_rank < 3;

-- One row per event. event_id is unique: a batch sent again after a crash inserts nothing twice.
CREATE TABLE core.task_run_log (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id text COLLATE "C" NOT NULL UNIQUE,
  run_id text COLLATE "C" NOT NULL,
  event text NOT NULL,
  at timestamptz NOT NULL,
  task text,
  pool text,
  payload jsonb NOT NULL,
  spool_seq bigint NOT NULL,
  received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX task_run_log_run_idx ON core.task_run_log (run_id, at, id);
`,
};
