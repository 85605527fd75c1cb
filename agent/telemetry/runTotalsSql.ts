import { FINAL_STATES } from '../../shared/protocol';
import { RUN_DURATION_BUCKETS } from '../metrics/runTotals';

// The metrics' figures of ended runs (by fetcher and outcome: how many, their retries, the last
// success; by fetcher and duration bucket: how many and their seconds), kept by triggers in the
// transaction that writes each run's end. The agent reads a few dozen rows at start however long the
// history is, retention never lowers a counter, and every writer of the file (an older agent or CLI
// too) keeps them right. A time that is not one (a damaged body) is skipped, as Date.parse skips it:
// it must not hide the last good success. Additive, like SPOOL_RUN_INDEXES: the schema version stays.

const TERMINAL = `(${FINAL_STATES.map((s) => `'${s}'`).join(', ')})`;

/**
 * `status` is an outcome, as comparisons: the triggers' WHEN is evaluated at every write of a run's
 * row (each of its moves sets the status). SQLite codes an `IN (…)` list as a temporary index filled
 * at each execution of the program that holds it, a trigger's firing included: ~50 µs at a run's end
 * and a few at each other write of its row (a model of the spool's writes: ~90 µs per run's end with
 * the lists, ~35 with these comparisons, ~25 without triggers). The one-off queries keep TERMINAL.
 */
const isTerminal = (status: string) => `(${FINAL_STATES.map((s) => `${status} = '${s}'`).join(' OR ')})`;

/** A body's ISO time as integer milliseconds (NULL when absent or not a time), as Date.parse reads it. */
const msOf = (body: string, field: string) => `CAST(round(unixepoch(json_extract(${body}, '$.${field}'), 'subsec') * 1000) AS INTEGER)`;

/** The duration of a run in seconds, as the histogram observes it (finishedAt − startedAt). */
const secondsOf = (body: string) => `(${msOf(body, 'finishedAt')} - ${msOf(body, 'startedAt')}) / 1000.0`;

/** The bucket index of `s` seconds: the first bound at or above it, or the count of bounds (+Inf). */
const bucketOf = (s: string) =>
  `CASE ${RUN_DURATION_BUCKETS.map((le, i) => `WHEN ${s} <= ${le} THEN ${i}`).join(' ')} ELSE ${RUN_DURATION_BUCKETS.length} END`;

const retriesOf = (body: string) => `max(coalesce(json_extract(${body}, '$.attempt'), 1) - 1, 0)`;

/** Counts one run that has just ended (NEW in a trigger). */
const COUNT_NEW = `
  INSERT INTO run_totals (fetcher, status, runs, retries, last_finished)
  VALUES (NEW.fetcher, NEW.status, 1, ${retriesOf('NEW.body')},
    CASE WHEN NEW.status = 'completed' AND ${msOf('NEW.body', 'finishedAt')} IS NOT NULL THEN json_extract(NEW.body, '$.finishedAt') END)
  ON CONFLICT (fetcher, status) DO UPDATE SET runs = runs + 1, retries = retries + excluded.retries,
    last_finished = CASE WHEN last_finished IS NULL OR excluded.last_finished > last_finished
      THEN coalesce(excluded.last_finished, last_finished) ELSE last_finished END;
  INSERT INTO run_durations (fetcher, bucket, runs, seconds)
  SELECT NEW.fetcher, ${bucketOf('s')}, 1, s FROM (SELECT ${secondsOf('NEW.body')} AS s) WHERE s >= 0
  ON CONFLICT (fetcher, bucket) DO UPDATE SET runs = runs + 1, seconds = seconds + excluded.seconds;`;

/** Run after SPOOL_SCHEMA at every open, in the open's transaction. */
export const SPOOL_RUN_TOTALS = `
CREATE TABLE IF NOT EXISTS run_totals (
  fetcher TEXT NOT NULL,
  status TEXT NOT NULL,
  runs INTEGER NOT NULL,
  retries INTEGER NOT NULL,
  last_finished TEXT,
  PRIMARY KEY (fetcher, status)
);
CREATE TABLE IF NOT EXISTS run_durations (
  fetcher TEXT NOT NULL,
  bucket INTEGER NOT NULL,
  runs INTEGER NOT NULL,
  seconds REAL NOT NULL,
  PRIMARY KEY (fetcher, bucket)
);
CREATE TRIGGER IF NOT EXISTS run_ended_inserted AFTER INSERT ON runs WHEN ${isTerminal('NEW.status')}
BEGIN ${COUNT_NEW}
END;
-- A run's end is counted once: when its row turns from waiting or running to an outcome.
CREATE TRIGGER IF NOT EXISTS run_ended_updated AFTER UPDATE OF status ON runs
WHEN ${isTerminal('NEW.status')} AND NOT ${isTerminal('OLD.status')}
BEGIN ${COUNT_NEW}
END;
`;

/** The triggers above; one whose WHEN has an `IN (` list is an earlier version's (see isTerminal). */
export const RUN_TOTALS_TRIGGERS = ['run_ended_inserted', 'run_ended_updated'] as const;

export const SELECT_RUN_TOTALS = 'SELECT fetcher, status, runs, retries, last_finished AS lastFinished FROM run_totals';

export const SELECT_RUN_DURATIONS = 'SELECT fetcher, bucket, runs, seconds FROM run_durations';

/** The meta key that says a file's run totals were seeded. */
export const RUN_TOTALS_SEEDED = 'run_totals';

/**
 * Once per file (its meta has no RUN_TOTALS_SEEDED), in the open's transaction that creates the
 * triggers, so that no end is counted twice or missed: the runs already ended.
 */
export const SEED_RUN_TOTALS = `
INSERT INTO run_totals (fetcher, status, runs, retries, last_finished)
SELECT fetcher, status, count(*), sum(${retriesOf('body')}),
  CASE WHEN status = 'completed' THEN max(CASE WHEN ${msOf('body', 'finishedAt')} IS NOT NULL THEN json_extract(body, '$.finishedAt') END) END
FROM runs WHERE status IN ${TERMINAL}
GROUP BY fetcher, status;
INSERT INTO run_durations (fetcher, bucket, runs, seconds)
SELECT fetcher, ${bucketOf('s')}, count(*), sum(s)
FROM (SELECT fetcher, ${secondsOf('body')} AS s FROM runs
  WHERE status IN ${TERMINAL})
WHERE s >= 0 GROUP BY 1, 2;
INSERT INTO meta (key, value) VALUES ('${RUN_TOTALS_SEEDED}', '1');
`;
