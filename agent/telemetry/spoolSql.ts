// The spool's SQLite schema and statements. Kept as string constants (not .sql files) because esbuild
// bundles the agent into one dist/agent.js with no files beside it to read at run time.

/** Bumped when the spool's schema changes; a file with a higher version is from a newer agent. */
export const SPOOL_SCHEMA_VERSION = 2;

export const SPOOL_SCHEMA = `
-- AUTOINCREMENT: a seq is never reused after the table empties, so seq order is spool order for good
-- (PostgreSQL keeps it as spool_seq, and "every row up to seq N" stays a valid batch boundary).
CREATE TABLE IF NOT EXISTS event (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id TEXT NOT NULL,
  run_id TEXT NOT NULL,
  event TEXT NOT NULL,
  at TEXT NOT NULL,
  task TEXT NOT NULL,
  pool TEXT NOT NULL,
  payload TEXT NOT NULL,
  spooled_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
-- Several processes write one spool (the agent, CLI emits, a CLI flush): a counter kept by triggers is
-- right for all of them and cheap to read, where count(*) would scan a million rows.
CREATE TABLE IF NOT EXISTS counter (name TEXT PRIMARY KEY, n INTEGER NOT NULL);
INSERT OR IGNORE INTO counter (name, n) SELECT 'pending', count(*) FROM event;
CREATE TRIGGER IF NOT EXISTS event_added AFTER INSERT ON event
  BEGIN UPDATE counter SET n = n + 1 WHERE name = 'pending'; END;
CREATE TRIGGER IF NOT EXISTS event_removed AFTER DELETE ON event
  BEGIN UPDATE counter SET n = n - 1 WHERE name = 'pending'; END;
-- Rows the flush could not send (not valid, or refused by PostgreSQL): kept for a person to look at,
-- out of the way of the rows behind them. Additive: an older agent ignores the table.
CREATE TABLE IF NOT EXISTS quarantine (
  seq INTEGER PRIMARY KEY,
  event_id TEXT NOT NULL,
  run_id TEXT NOT NULL,
  event TEXT NOT NULL,
  at TEXT NOT NULL,
  task TEXT NOT NULL,
  pool TEXT NOT NULL,
  payload TEXT NOT NULL,
  spooled_ms INTEGER NOT NULL,
  reason TEXT NOT NULL,
  quarantined_ms INTEGER NOT NULL
);
-- Version 2: the agent's run state lives here, beside the events, so that a run's move and its event
-- are one transaction (in WAL mode a transaction across two files is atomic per file only).
-- body is the run as JSON; the columns are what queries select on.
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY,
  fetcher TEXT NOT NULL,
  status TEXT NOT NULL,
  enqueued_at TEXT NOT NULL,
  owner_pid INTEGER NOT NULL,
  owner_start_time INTEGER NOT NULL,
  body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_status ON runs(status);
CREATE INDEX IF NOT EXISTS runs_fetcher ON runs(fetcher, enqueued_at);
`;

/*
 * Two of the run indexes hold ended runs only (partial). A live run's row is written three or four
 * times (queued, its wait, its spawn intent, its start), each time with a new body, and each write
 * recomputed every index on the body, old key and new, for rows these two never answer for.
 * `runs_fetcher_finished` serves each fetcher's last success: its WHERE is that query's own term
 * (`status = 'completed'`), so the planner still uses it. `runs_figures` served the metrics' start,
 * which reads the run totals now (runTotalsSql.ts); it stays, over ended runs, for an older agent of
 * the same file. Its WHERE is two comparisons, not a `NOT IN (…)` list: SQLite evaluates it at every
 * write of a row, like the triggers' WHEN (see isTerminal in runTotalsSql.ts). An
 * older agent's `CREATE INDEX IF NOT EXISTS` leaves them as they are; a file with the earlier, whole
 * indexes gets them made again at its first open by this version (dropEarlierRunSchema).
 */
const RUNS_FETCHER_FINISHED = `CREATE INDEX IF NOT EXISTS runs_fetcher_finished ON runs(fetcher, status, json_extract(body, '$.finishedAt')) WHERE status = 'completed';`;
const RUNS_FIGURES = `CREATE INDEX IF NOT EXISTS runs_figures ON runs(status, fetcher, json_extract(body, '$.startedAt'), json_extract(body, '$.finishedAt'), json_extract(body, '$.attempt')) WHERE status <> 'waiting' AND status <> 'running';`;

/** The run indexes that hold ended runs only: an index of one of these names without a WHERE is an earlier version's. */
export const ENDED_RUN_INDEXES = ['runs_fetcher_finished', 'runs_figures'] as const;

/**
 * Indexes that keep the run history's queries bounded however many ended runs retention keeps (the
 * newest runs, each fetcher's last start and last success), applied after SPOOL_SCHEMA at every
 * open. On the JSON body's fields, not new columns: SQLite maintains an index on an expression for
 * every writer, so an older agent or CLI that writes the same file keeps them right. Additive (an
 * older agent reads and writes the file as before), so the schema version stays: a higher version
 * would make an older agent refuse the file. Built once, on the first open of a file without them.
 */
export const SPOOL_RUN_INDEXES = `
CREATE INDEX IF NOT EXISTS runs_enqueued ON runs(enqueued_at);
CREATE INDEX IF NOT EXISTS runs_fetcher_started ON runs(fetcher, json_extract(body, '$.startedAt'));
${RUNS_FETCHER_FINISHED}
${RUNS_FIGURES}
`;

export const UPSERT_RUN = `
INSERT INTO runs (run_id, fetcher, status, enqueued_at, owner_pid, owner_start_time, body)
VALUES (@runId, @fetcher, @status, @enqueuedAt, @ownerPid, @ownerStartTime, @body)
ON CONFLICT(run_id) DO UPDATE SET status = excluded.status, owner_pid = excluded.owner_pid,
  owner_start_time = excluded.owner_start_time, body = excluded.body`;

/** A run from an older file (state.db, a fallback) never overwrites one this file already has. */
export const IMPORT_RUN = `
INSERT OR IGNORE INTO runs (run_id, fetcher, status, enqueued_at, owner_pid, owner_start_time, body)
VALUES (@runId, @fetcher, @status, @enqueuedAt, @ownerPid, @ownerStartTime, @body)`;

export const SELECT_ALL_RUNS = `
SELECT run_id AS runId, fetcher, status, enqueued_at AS enqueuedAt, owner_pid AS ownerPid, owner_start_time AS ownerStartTime, body FROM runs`;

export const SELECT_RUN_BODY = 'SELECT body FROM runs WHERE run_id = ?';

export const INSERT_EVENT = `
INSERT INTO event (event_id, run_id, event, at, task, pool, payload, spooled_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)`;

export const SELECT_BATCH = `
SELECT seq, event_id, run_id, event, at, task, pool, payload FROM event ORDER BY seq LIMIT ?`;

export const DELETE_THROUGH = 'DELETE FROM event WHERE seq <= ?';

export const SELECT_PENDING = "SELECT n FROM counter WHERE name = 'pending'";

export const SELECT_OLDEST = 'SELECT spooled_ms FROM event ORDER BY seq LIMIT 1';

export const SELECT_META = 'SELECT value FROM meta WHERE key = ?';

export const UPSERT_META = 'INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value';

/** Moves one event to the quarantine with the reason (a token and its detail). */
export const QUARANTINE_EVENT = `
INSERT OR REPLACE INTO quarantine (seq, event_id, run_id, event, at, task, pool, payload, spooled_ms, reason, quarantined_ms)
SELECT seq, event_id, run_id, event, at, task, pool, payload, spooled_ms, ?, ? FROM event WHERE seq = ?`;

export const DELETE_EVENT = 'DELETE FROM event WHERE seq = ?';

export const SELECT_QUARANTINED = 'SELECT count(*) FROM quarantine';

/** Every column a copy needs (a rescue from a deleted file, a fallback drained into the main spool). */
export const SELECT_ALL_EVENTS = 'SELECT event_id, run_id, event, at, task, pool, payload, spooled_ms FROM event ORDER BY seq';
