import Database from 'better-sqlite3';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { RunStore, toRunRow, type StoredRun } from '../../agent/runs/runStore';
import { Spool } from '../../agent/telemetry/spool';
import { INSERT_EVENT, SPOOL_SCHEMA, SPOOL_SCHEMA_VERSION, UPSERT_RUN } from '../../agent/telemetry/spoolSql';
import { makeTestEnv } from '../support/harness';
import { memoryLogger } from '../support/memoryLogger';
import { storedRun } from '../support/storedRun';

const FETCHERS = ['sidra', 'anac', 'ibge'];
const START = Date.parse('2026-01-01T00:00:00Z');

/** An ended run `n` minutes after START; every fourth run failed. */
function ended(n: number, status: StoredRun['status'] = n % 4 === 1 ? 'failed' : 'completed'): StoredRun {
  const at = (ms: number) => new Date(START + n * 60_000 + ms).toISOString();
  return storedRun(
    {
      runId: `ix${String(n).padStart(6, '0')}-0123abcd`,
      fetcher: FETCHERS[n % FETCHERS.length],
      status,
      enqueuedAt: at(0),
      pid: 1000 + n,
      startTime: 10 + n,
    },
    at(100),
    4.9,
  );
}

/** A spool file as the agent before the run indexes left it: the version-2 schema, runs and events. */
function oldSpool(file: string, count: number): void {
  const db = new Database(file);
  try {
    db.pragma('journal_mode = WAL');
    db.exec(`BEGIN IMMEDIATE; ${SPOOL_SCHEMA} PRAGMA user_version = ${SPOOL_SCHEMA_VERSION}; COMMIT;`);
    const upsert = db.prepare(UPSERT_RUN);
    const event = db.prepare(INSERT_EVENT);
    db.transaction(() => {
      for (let n = 0; n < count; n++) {
        const run = ended(n);
        upsert.run(toRunRow(run));
        event.run(`e-${n}`, run.runId, 'finish', run.finishedAt, run.fetcher, run.pool, '{}', 0);
      }
    })();
  } finally {
    db.close();
  }
}

const indexes = (db: Database.Database) =>
  (
    db.prepare(`SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs' ORDER BY name`).all() as Array<{ name: string }>
  ).map((r) => r.name);

const plan = (db: Database.Database, sql: string, ...args: unknown[]) =>
  (db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...args) as Array<{ detail: string }>).map((r) => r.detail).join(' | ');

test('a spool of an earlier agent gets the run indexes without losing a row, and its queries use them', () => {
  const t = makeTestEnv(null);
  const file = path.join(t.root, 'spool.db');
  const count = 3000;
  oldSpool(file, count);
  const before = new Database(file, { readonly: true });
  const bodies = before.prepare('SELECT run_id, body FROM runs ORDER BY run_id').all();
  const events = (before.prepare('SELECT count(*) AS n FROM event').get() as { n: number }).n;
  assert.deepEqual(indexes(before), ['runs_fetcher', 'runs_status', 'sqlite_autoindex_runs_1']);
  before.close();

  const spool = new Spool({ path: file, logger: memoryLogger() });
  try {
    const store = new RunStore(spool, null);
    spool.withDatabase((db) => {
      assert.deepEqual(indexes(db), [
        'runs_enqueued',
        'runs_fetcher',
        'runs_fetcher_finished',
        'runs_fetcher_started',
        'runs_figures',
        'runs_status',
        'sqlite_autoindex_runs_1',
      ]);
      assert.deepEqual(db.prepare('SELECT run_id, body FROM runs ORDER BY run_id').all(), bodies, 'every row kept as it was');
      assert.equal((db.prepare('SELECT count(*) AS n FROM event').get() as { n: number }).n, events, 'every event kept');
      assert.equal(db.pragma('user_version', { simple: true }), SPOOL_SCHEMA_VERSION, 'an older agent still opens the file');
      assert.match(plan(db, 'SELECT body FROM runs ORDER BY enqueued_at DESC LIMIT 50'), /USING INDEX runs_enqueued/);
      assert.match(
        plan(db, `SELECT max(json_extract(body, '$.startedAt')) AS at FROM runs WHERE fetcher = ?`, 'anac'),
        /COVERING INDEX runs_fetcher_started/,
      );
      assert.match(
        plan(db, `SELECT max(json_extract(body, '$.finishedAt')) AS at FROM runs WHERE fetcher = ? AND status = 'completed'`, 'anac'),
        /COVERING INDEX runs_fetcher_finished/,
      );
    });
    // The answers the schedule, the metrics and the CLI read, from the indexes.
    assert.deepEqual(
      store.recent(3).map((r) => r.runId),
      [ended(count - 1), ended(count - 2), ended(count - 3)].map((r) => r.runId),
    );
    // What the runs say, read one by one, oldest first.
    const runs = Array.from({ length: count }, (_, n) => ended(n));
    for (const fetcher of FETCHERS) {
      const own = runs.filter((r) => r.fetcher === fetcher);
      const done = own.filter((r) => r.status === 'completed' || r.status === 'failed');
      assert.equal(store.lastStartedAt(fetcher)?.toISOString(), own[own.length - 1].startedAt, fetcher);
      assert.equal(store.lastSucceededAt(fetcher)?.toISOString(), own.filter((r) => r.status === 'completed').pop()?.finishedAt, fetcher);
      assert.equal(store.lastOutcomes().get(fetcher), done[done.length - 1].status, fetcher);
    }
    assert.ok(
      FETCHERS.some((f) => store.lastOutcomes().get(f) === 'failed') && FETCHERS.some((f) => store.lastOutcomes().get(f) === 'completed'),
      'the data has both last outcomes',
    );
    assert.equal(
      store.endedTotals().ends.reduce((n, e) => n + e.runs, 0),
      count,
      'every ended run in the totals',
    );

    // A writer that knows nothing of the indexes (an older CLI on the same file): SQLite keeps them right.
    const older = new Database(file);
    older.pragma('busy_timeout = 10000');
    older.prepare(UPSERT_RUN).run(toRunRow({ ...ended(count + 1), fetcher: 'anac' }));
    older.close();
    assert.equal(store.lastStartedAt('anac')?.toISOString(), ended(count + 1).startedAt);
    assert.equal(store.recent(1)[0].runId, ended(count + 1).runId);
  } finally {
    spool.close();
  }
});

test('the run table is trimmed to the retention count when it is above the built-in window, never below it', async () => {
  for (const [retentionRuns, left] of [
    [0, 5001],
    [8000, 5700],
  ] as const) {
    const t = makeTestEnv(null);
    const file = path.join(t.root, 'spool.db');
    oldSpool(file, 5200);
    const spool = new Spool({ path: file, logger: memoryLogger() });
    try {
      const store = new RunStore(spool, null, memoryLogger(), () => new Date(), retentionRuns);
      // 499 saves on disk, then the 500th, before which the store trims (5699 rows then).
      await Promise.all(Array.from({ length: 499 }, (_, i) => store.save(ended(10_000 + i))));
      await store.save(ended(20_000));
      const rows = spool.withDatabase((db) => (db.prepare('SELECT count(*) AS n FROM runs').get() as { n: number }).n);
      assert.equal(rows, left, `retention ${retentionRuns}`);
      assert.ok(store.get(ended(20_000).runId), 'the newest run is kept');
    } finally {
      spool.close();
    }
  }
});
