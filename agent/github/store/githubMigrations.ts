/**
 * The `github` schema, one numbered, append-only list for both engines: each step has its PostgreSQL
 * text and the SQLite text of the same tables (SQLite has no schemas; the file is attached as `github`).
 * Times are epoch milliseconds (bigint) on both sides, so no statement depends on an engine's clock.
 */
export interface GithubMigration {
  version: number;
  name: string;
  postgres: string;
  sqlite: string;
}

const tables = `
CREATE TABLE github.sync (
  id text PRIMARY KEY,
  status text NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
  reason text,
  repos text NOT NULL,
  records_collected bigint NOT NULL DEFAULT 0,
  records_created bigint NOT NULL DEFAULT 0,
  requests_made bigint NOT NULL DEFAULT 0,
  requests_saved bigint NOT NULL DEFAULT 0,
  hibernations bigint NOT NULL DEFAULT 0,
  secondary_backoffs bigint NOT NULL DEFAULT 0,
  started_at bigint NOT NULL,
  finished_at bigint,
  progress_at bigint NOT NULL,
  hibernating_until bigint,
  budget text,
  quota text
);
CREATE INDEX sync_status ON github.sync (status, started_at);

-- One row per (sync, repository, stage). state 'done' is the checkpoint; 'in-progress' keeps the page
-- cursor so that a resume never asks again for a page already stored; 'not-reached' keeps the reason.
CREATE TABLE github.checkpoint (
  sync_id text NOT NULL REFERENCES github.sync (id) ON DELETE CASCADE,
  repo text NOT NULL,
  stage text NOT NULL CHECK (stage IN ('changes', 'checks')),
  state text NOT NULL CHECK (state IN ('in-progress', 'done', 'not-reached')),
  cursor text,
  reason text,
  updated_at bigint NOT NULL,
  PRIMARY KEY (sync_id, repo, stage)
);

CREATE TABLE github.pull_request (
  id text PRIMARY KEY,
  repo text NOT NULL,
  number integer NOT NULL,
  title text NOT NULL,
  state text NOT NULL,
  created_at text NOT NULL,
  updated_at text NOT NULL,
  merged_at text,
  sync_id text NOT NULL
);

CREATE TABLE github.workflow_run (
  id bigint PRIMARY KEY,
  repo text NOT NULL,
  name text,
  status text,
  conclusion text,
  created_at text NOT NULL,
  updated_at text NOT NULL,
  jobs_stored_at bigint,
  sync_id text NOT NULL
);
CREATE INDEX workflow_run_repo ON github.workflow_run (repo);

CREATE TABLE github.workflow_job (
  id bigint PRIMARY KEY,
  run_id bigint NOT NULL,
  name text NOT NULL,
  status text NOT NULL,
  conclusion text,
  started_at text,
  completed_at text,
  sync_id text NOT NULL
);
`;

// SQLite puts the schema on the index's name, not the table's, and references within the same file.
const sqliteTables = tables
  .replace(/CREATE INDEX (\w+) ON github\.(\w+)/g, 'CREATE INDEX github.$1 ON $2')
  .replace(/REFERENCES github\.(\w+)/g, 'REFERENCES $1');

const requestsByBudget = `ALTER TABLE github.sync ADD COLUMN requests_core bigint NOT NULL DEFAULT 0;
ALTER TABLE github.sync ADD COLUMN requests_graphql bigint NOT NULL DEFAULT 0;`;

// The sync as a daily collector: cursors per repository and stream that outlive a sync (high_water:
// the newest change stored by a completed stage; cursor: where an unfinished full load stopped;
// window_from: where the recent-runs listing starts, kept for a week so its URLs and ETags stay the same), the
// ETag of every REST answer (with the next page and total it came with, for a 304 has neither), what
// a run's stored jobs were read at, and the fields dashboards read. Booleans are 0/1 on both engines.
const incremental = `
CREATE TABLE github.stream_state (
  repo text NOT NULL,
  stream text NOT NULL CHECK (stream IN ('pull_requests', 'workflow_runs')),
  high_water text,
  cursor text,
  window_from text,
  sync_id text NOT NULL,
  updated_at bigint NOT NULL,
  PRIMARY KEY (repo, stream)
);
CREATE TABLE github.etag (
  path text PRIMARY KEY,
  etag text NOT NULL,
  next_path text,
  total_count bigint,
  updated_at bigint NOT NULL
);
ALTER TABLE github.sync ADD COLUMN requests_not_modified bigint NOT NULL DEFAULT 0;
ALTER TABLE github.sync ADD COLUMN full_load integer NOT NULL DEFAULT 0;
ALTER TABLE github.pull_request ADD COLUMN author text;
ALTER TABLE github.pull_request ADD COLUMN is_draft integer;
ALTER TABLE github.pull_request ADD COLUMN review_decision text;
ALTER TABLE github.pull_request ADD COLUMN closed_at text;
ALTER TABLE github.pull_request ADD COLUMN base_ref text;
ALTER TABLE github.pull_request ADD COLUMN head_ref text;
ALTER TABLE github.pull_request ADD COLUMN head_sha text;
ALTER TABLE github.pull_request ADD COLUMN checks_state text;
ALTER TABLE github.workflow_run ADD COLUMN run_attempt integer;
ALTER TABLE github.workflow_run ADD COLUMN event text;
ALTER TABLE github.workflow_run ADD COLUMN head_sha text;
ALTER TABLE github.workflow_run ADD COLUMN head_branch text;
ALTER TABLE github.workflow_run ADD COLUMN run_started_at text;
ALTER TABLE github.workflow_run ADD COLUMN actor text;
ALTER TABLE github.workflow_run ADD COLUMN pull_requests text;
ALTER TABLE github.workflow_run ADD COLUMN jobs_run_attempt integer;
ALTER TABLE github.workflow_run ADD COLUMN jobs_run_updated_at text;
ALTER TABLE github.workflow_run ADD COLUMN jobs_completed integer;
ALTER TABLE github.workflow_run ADD COLUMN jobs_sync_id text;
ALTER TABLE github.workflow_job ADD COLUMN run_attempt integer;
ALTER TABLE github.workflow_job ADD COLUMN created_at text;
ALTER TABLE github.workflow_job ADD COLUMN runner_name text;
CREATE INDEX workflow_job_run ON github.workflow_job (run_id);
CREATE INDEX workflow_run_repo_created ON github.workflow_run (repo, created_at);
`;
const sqliteIncremental = incremental.replace(/CREATE INDEX (\w+) ON github\.(\w+)/g, 'CREATE INDEX github.$1 ON $2');
// The entry a sync belongs to (one running sync per entry, across the agent and CLIs without one: the
// index refuses a second) and when a leg last said it works on it (the stuck-sync reconciler measures
// progress only while one does: waiting for a slot, for storage or for an agent does not count).
const syncOwnerPg = `ALTER TABLE github.sync ADD COLUMN entry text;
ALTER TABLE github.sync ADD COLUMN alive_at bigint;
CREATE UNIQUE INDEX sync_one_running_per_entry ON github.sync (entry) WHERE status = 'running';`;
const syncOwnerSqlite = `ALTER TABLE github.sync ADD COLUMN entry text;
ALTER TABLE github.sync ADD COLUMN alive_at bigint;
CREATE UNIQUE INDEX github.sync_one_running_per_entry ON sync (entry) WHERE status = 'running';`;

export const GITHUB_MIGRATIONS: readonly GithubMigration[] = [
  { version: 1, name: 'github_sync', postgres: tables, sqlite: sqliteTables },
  // The agent's run of a sync (null for a CLI's): what an agent finds again after a restart or kill -9.
  {
    version: 2,
    name: 'sync_run_id',
    postgres: 'ALTER TABLE github.sync ADD COLUMN run_id text',
    sqlite: 'ALTER TABLE github.sync ADD COLUMN run_id text',
  },
  // requests_made by budget (each request is reserved on one), for quantilica_github_requests_total {budget}.
  { version: 3, name: 'sync_requests_by_budget', postgres: requestsByBudget, sqlite: requestsByBudget },
  { version: 4, name: 'incremental_streams', postgres: incremental, sqlite: sqliteIncremental },
  { version: 5, name: 'sync_entry_and_liveness', postgres: syncOwnerPg, sqlite: syncOwnerSqlite },
];
