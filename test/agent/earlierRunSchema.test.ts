import Database from 'better-sqlite3';
import { spawn } from 'node:child_process';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { RunStore, toRunRow, type StoredRun } from '../../agent/runs/runStore';
import { RUN_TOTALS_SEEDED, SPOOL_RUN_TOTALS } from '../../agent/telemetry/runTotalsSql';
import { Spool } from '../../agent/telemetry/spool';
import { SPOOL_SCHEMA, SPOOL_SCHEMA_VERSION, UPSERT_RUN } from '../../agent/telemetry/spoolSql';
import { makeTestEnv } from '../support/harness';
import { memoryLogger } from '../support/memoryLogger';
import { storedRun } from '../support/storedRun';

/** The run indexes as the version before made them: over every run, live ones too. */
const EARLIER_RUN_INDEXES = `
CREATE INDEX IF NOT EXISTS runs_enqueued ON runs(enqueued_at);
CREATE INDEX IF NOT EXISTS runs_fetcher_started ON runs(fetcher, json_extract(body, '$.startedAt'));
CREATE INDEX IF NOT EXISTS runs_fetcher_finished ON runs(fetcher, status, json_extract(body, '$.finishedAt'));
CREATE INDEX IF NOT EXISTS runs_figures ON runs(status, fetcher, json_extract(body, '$.startedAt'), json_extract(body, '$.finishedAt'), json_extract(body, '$.attempt'));
`;

/** The run-totals triggers as the version before wrote their WHEN: with `IN (…)` lists (the bodies are the same). */
const outcomeList = "('completed', 'failed', 'cancelled', 'skipped')";
const EARLIER_RUN_TOTALS = SPOOL_RUN_TOTALS.replace(
  /WHEN \(NEW\.status = [^)]*\) AND NOT \(OLD\.status = [^)]*\)/,
  `WHEN NEW.status IN ${outcomeList} AND OLD.status NOT IN ${outcomeList}`,
).replace(/WHEN \(NEW\.status = [^)]*\)\nBEGIN/, `WHEN NEW.status IN ${outcomeList}\nBEGIN`);

const at = (minute: number) => new Date(Date.parse('2026-03-01T00:00:00Z') + minute * 60_000).toISOString();

/** Run `n`: ended (completed, or failed every third) for n < 40, running for 40 ≤ n < 45, waiting above. */
function run(n: number): StoredRun {
  const status: StoredRun['status'] = n >= 45 ? 'waiting' : n >= 40 ? 'running' : n % 3 === 0 ? 'failed' : 'completed';
  const fields = { runId: `er${String(n).padStart(4, '0')}-0123abcd`, fetcher: n % 2 === 0 ? 'sidra' : 'anac', status };
  const ended = storedRun(fields, at(n), 30);
  return status === 'waiting' || status === 'running'
    ? { ...ended, finishedAt: null, ...(status === 'waiting' ? { startedAt: null } : {}) }
    : ended;
}

/** A spool as the version before left it: its indexes and triggers, its totals seeded, 50 runs. */
function earlierSpool(file: string): void {
  const db = new Database(file);
  try {
    db.pragma('journal_mode = WAL');
    db.exec(`BEGIN IMMEDIATE; ${SPOOL_SCHEMA} ${EARLIER_RUN_INDEXES} ${EARLIER_RUN_TOTALS}
      INSERT INTO meta (key, value) VALUES ('${RUN_TOTALS_SEEDED}', '1'); PRAGMA user_version = ${SPOOL_SCHEMA_VERSION}; COMMIT;`);
    const upsert = db.prepare(UPSERT_RUN);
    db.transaction(() => {
      for (let n = 0; n < 50; n++) upsert.run(toRunRow(run(n)));
    })();
  } finally {
    db.close();
  }
}

const schemaSql = (db: Database.Database, name: string) =>
  db.prepare(`SELECT sql FROM sqlite_master WHERE name = ?`).pluck().get(name) as string;

const plan = (db: Database.Database, sql: string) =>
  (db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all() as Array<{ detail: string }>).map((r) => r.detail).join(' | ');

const totals = (db: Database.Database) =>
  db.prepare('SELECT fetcher, status, runs FROM run_totals ORDER BY fetcher, status').all() as Array<{
    fetcher: string;
    status: string;
    runs: number;
  }>;

test("an earlier version's run indexes and run-totals triggers are made again at the first open, with the same rows, answers and totals", async () => {
  const t = makeTestEnv(null);
  const file = path.join(t.root, 'spool.db');
  earlierSpool(file);
  const before = new Database(file, { readonly: true });
  assert.doesNotMatch(schemaSql(before, 'runs_figures'), / WHERE /, 'the earlier file has the whole index');
  assert.match(schemaSql(before, 'run_ended_updated'), / IN \(/, 'and the triggers with IN lists');
  const rows = before.prepare('SELECT run_id, status, body FROM runs ORDER BY run_id').all();
  const earlierTotals = totals(before);
  before.close();
  // 40 ended runs, half of them each fetcher's: what the earlier triggers counted.
  assert.equal(
    earlierTotals.reduce((n, r) => n + r.runs, 0),
    40,
  );

  const spool = new Spool({ path: file, logger: memoryLogger() });
  try {
    const store = new RunStore(spool, null);
    spool.withDatabase((db) => {
      assert.match(schemaSql(db, 'runs_fetcher_finished'), /WHERE status = 'completed'$/);
      assert.match(schemaSql(db, 'runs_figures'), /WHERE status <> 'waiting' AND status <> 'running'$/);
      for (const trigger of ['run_ended_inserted', 'run_ended_updated']) assert.doesNotMatch(schemaSql(db, trigger), / IN \(/, trigger);
      assert.deepEqual(db.prepare('SELECT run_id, status, body FROM runs ORDER BY run_id').all(), rows, 'every row kept as it was');
      assert.deepEqual(totals(db), earlierTotals, 'the totals kept, not seeded again');
      // The planner still answers a fetcher's last success from its index.
      assert.match(
        plan(db, `SELECT max(json_extract(body, '$.finishedAt')) AS at FROM runs WHERE fetcher = 'anac' AND status = 'completed'`),
        /COVERING INDEX runs_fetcher_finished/,
      );
    });
    const completed = Array.from({ length: 40 }, (_, n) => run(n)).filter((r) => r.status === 'completed');
    for (const fetcher of ['sidra', 'anac']) {
      const last = completed.filter((r) => r.fetcher === fetcher).pop()!;
      assert.equal(store.lastSucceededAt(fetcher)?.toISOString(), last.finishedAt, fetcher);
    }
    // A running run that ends now: in the ended runs' index with its end, counted once however often its end is written.
    const ending = { ...run(41), status: 'completed' as const, exitCode: 0, finishedAt: at(500) };
    await store.save({ ...run(42), startedAt: at(100) });
    await store.save(ending);
    await store.save(ending);
    assert.equal(store.lastSucceededAt(ending.fetcher)?.toISOString(), at(500));
    spool.withDatabase((db) => {
      const ended = totals(db).find((r) => r.fetcher === ending.fetcher && r.status === 'completed')!;
      const earlier = earlierTotals.find((r) => r.fetcher === ending.fetcher && r.status === 'completed')!;
      assert.equal(ended.runs, earlier.runs + 1, 'the end counted once; a running run written again counted nowhere');
      assert.equal(
        totals(db).reduce((n, r) => n + r.runs, 0),
        41,
      );
    });
  } finally {
    spool.close();
  }

  // An older agent opening the file again (its CREATE … IF NOT EXISTS) leaves this version's schema.
  const older = new Database(file);
  older.exec(`BEGIN IMMEDIATE; ${SPOOL_SCHEMA} ${EARLIER_RUN_INDEXES} ${EARLIER_RUN_TOTALS} COMMIT;`);
  assert.match(schemaSql(older, 'runs_figures'), / WHERE /);
  assert.doesNotMatch(schemaSql(older, 'run_ended_inserted'), / IN \(/);
  older.close();
});

/** Each run index and run-totals trigger: `earlier` (whole index, IN list), `current`, or missing. */
function runSchemaKinds(db: Database.Database): string[] {
  const sqlOf = (type: string, name: string) =>
    db.prepare(`SELECT sql FROM sqlite_master WHERE type = ? AND name = ?`).pluck().get(type, name) as string | undefined;
  return [
    ...['runs_fetcher_finished', 'runs_figures'].map((name) => {
      const sql = sqlOf('index', name);
      return `${name}: ${sql === undefined ? 'missing' : / WHERE /.test(sql) ? 'current' : 'earlier'}`;
    }),
    ...['run_ended_inserted', 'run_ended_updated'].map((name) => {
      const sql = sqlOf('trigger', name);
      return `${name}: ${sql === undefined ? 'missing' : / IN \(/.test(sql) ? 'earlier' : 'current'}`;
    }),
  ];
}

const OPEN_SPOOL = path.join(__dirname, '..', '..', 'agent', 'telemetry', 'openSpoolDatabase.js');

/**
 * The agent's own open of the spool in a process of its own, killed with SIGKILL right after the
 * SQLite statement `killAfter` picks has run: a crash at that point of the open's transaction.
 */
function openKilled(file: string, killAfter: string): Promise<NodeJS.Signals | number | null> {
  const script = `
    const Database = require(require.resolve('better-sqlite3', { paths: [${JSON.stringify(path.dirname(OPEN_SPOOL))}] }));
    const exec = Database.prototype.exec;
    const killAfter = ${killAfter};
    Database.prototype.exec = function (sql) {
      const done = exec.call(this, sql);
      if (killAfter(sql)) process.kill(process.pid, 'SIGKILL');
      return done;
    };
    require(${JSON.stringify(OPEN_SPOOL)}).openAt(${JSON.stringify(file)});
  `;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'ignore', 'inherit'] });
  return new Promise((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code)));
}

const EARLIER = ['runs_fetcher_finished: earlier', 'runs_figures: earlier', 'run_ended_inserted: earlier', 'run_ended_updated: earlier'];
const CURRENT = ['runs_fetcher_finished: current', 'runs_figures: current', 'run_ended_inserted: current', 'run_ended_updated: current'];

for (const [when, killAfter] of [
  ['its last drop', `(sql) => sql === 'DROP TRIGGER run_ended_updated'`],
  [
    'making the indexes and triggers again',
    `(sql) => sql.includes('CREATE INDEX IF NOT EXISTS runs_figures') && !sql.startsWith('BEGIN IMMEDIATE')`,
  ],
] as const) {
  test(`an agent killed in its first open right after ${when} leaves the earlier run schema whole; the next open makes it`, async () => {
    const t = makeTestEnv(null);
    const file = path.join(t.root, 'spool.db');
    earlierSpool(file);
    const before = new Database(file, { readonly: true });
    const earlierRows = before.prepare('SELECT run_id, status, body FROM runs ORDER BY run_id').all();
    const earlierTotals = totals(before);
    assert.deepEqual(runSchemaKinds(before), EARLIER);
    before.close();

    assert.equal(await openKilled(file, killAfter), 'SIGKILL', `the open reached ${when} and was killed there`);

    const after = new Database(file);
    try {
      assert.equal(after.pragma('integrity_check', { simple: true }), 'ok');
      assert.deepEqual(runSchemaKinds(after), EARLIER, 'nothing of the schema dropped without being made again');
      assert.deepEqual(after.prepare('SELECT run_id, status, body FROM runs ORDER BY run_id').all(), earlierRows);
      assert.deepEqual(totals(after), earlierTotals);
    } finally {
      after.close();
    }

    const spool = new Spool({ path: file, logger: memoryLogger() });
    try {
      spool.withDatabase((db) => {
        assert.deepEqual(runSchemaKinds(db), CURRENT);
        assert.deepEqual(db.prepare('SELECT run_id, status, body FROM runs ORDER BY run_id').all(), earlierRows);
        assert.deepEqual(totals(db), earlierTotals, 'the totals kept, not seeded again');
      });
    } finally {
      spool.close();
    }
  });
}
