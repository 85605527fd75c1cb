import Database from 'better-sqlite3';
import * as assert from 'node:assert/strict';
import * as path from 'node:path';
import { test } from 'node:test';
import { AgentMetrics, type MetricsSources } from '../../agent/metrics/agentMetrics';
import { RunStore, toRunRow, type StoredRun } from '../../agent/runs/runStore';
import { Spool } from '../../agent/telemetry/spool';
import { SPOOL_SCHEMA, SPOOL_SCHEMA_VERSION, UPSERT_RUN } from '../../agent/telemetry/spoolSql';
import { makeTestEnv } from '../support/harness';
import { memoryLogger } from '../support/memoryLogger';
import { storedRun } from '../support/storedRun';

// The metrics' counters start from totals the spool keeps as runs end. They must say what counting
// every stored run one by one says, for a file of an older agent (seeded once), for every writer of
// the file (triggers), and after retention deleted rows (a counter never goes down).

// Five fetchers against sixteen durations and seven outcomes: each fetcher has every duration and outcome.
const FETCHERS = ['sidra', 'anac', 'ibge', 'tse', 'comex'];
const STATUSES: StoredRun['status'][] = ['completed', 'completed', 'failed', 'cancelled', 'skipped', 'completed', 'failed'];
/** Durations (s) on, beside and past the histogram's bounds, and one that ends before it starts. */
const SECONDS = [0, 0.2, 1, 1.001, 4.999, 5, 14, 15, 59.5, 60, 301, 3600, 43_200, 43_200.5, 90_000, -3];

/** The runs; run 7 (completed) has a finish that is no time, as a damaged body would. */
function ended(n: number): StoredRun {
  const run = storedRun(
    {
      runId: `tot${String(n).padStart(6, '0')}`,
      fetcher: FETCHERS[n % FETCHERS.length],
      status: STATUSES[n % STATUSES.length],
      attempt: 1 + (n % 5 === 0 ? 2 : n % 3 === 0 ? 1 : 0),
      attempts: 3,
    },
    new Date(Date.parse('2026-01-01T00:00:00.000Z') + n * 60_000).toISOString(),
    SECONDS[n % SECONDS.length],
  );
  return n === 7 ? { ...run, finishedAt: 'not a time' } : run;
}

/** A spool file as an agent before the run totals left it, with `count` ended runs. */
function olderSpool(file: string, count: number): void {
  const db = new Database(file);
  try {
    db.pragma('journal_mode = WAL');
    db.exec(`BEGIN IMMEDIATE; ${SPOOL_SCHEMA} PRAGMA user_version = ${SPOOL_SCHEMA_VERSION}; COMMIT;`);
    const upsert = db.prepare(UPSERT_RUN);
    db.transaction(() => {
      for (let n = 0; n < count; n++) upsert.run(toRunRow(ended(n)));
    })();
  } finally {
    db.close();
  }
}

function sources(finished: MetricsSources['finished']): MetricsSources {
  return {
    version: '0',
    pools: () => [],
    activeRuns: () => [],
    schedule: () => ({ paused: false, catchUp: false, entries: [] }),
    disk: () => null,
    spool: () => null,
    sync: () => null,
    githubTotals: () => null,
    finished,
  };
}

/** The run-end metrics' lines, sums rounded to the millisecond (a total of seconds adds in another order). */
async function endLines(metrics: AgentMetrics): Promise<string[]> {
  return (await metrics.text())
    .split('\n')
    .filter((l) => /^quantilica_(runs_finished_total|run_duration_seconds|run_retries_total)/.test(l))
    .map((l) =>
      l.startsWith('quantilica_run_duration_seconds_sum') ? l.replace(/ (\S+)$/, (_, v: string) => ` ${Number(v).toFixed(3)}`) : l,
    )
    .sort();
}

/** The same metrics from counting each run as it ends. */
async function counted(runs: StoredRun[]): Promise<string[]> {
  const metrics = new AgentMetrics(sources(() => ({ ends: [], durations: [] })));
  for (const run of runs) metrics.observe(run);
  return endLines(metrics);
}

test("an older agent's spool gets run totals once, equal to counting each stored run, and the metrics start from them", async () => {
  const t = makeTestEnv(null);
  const file = path.join(t.root, 'spool.db');
  const count = 2000;
  olderSpool(file, count);
  const runs = Array.from({ length: count }, (_, n) => ended(n));
  const expected = await counted(runs);
  assert.ok(
    expected.some((l) => l.includes('le="+Inf"')) && expected.some((l) => /outcome="skipped"/.test(l)),
    'the runs reach every kind of line',
  );

  for (const open of ['first', 'second']) {
    const spool = new Spool({ path: file, logger: memoryLogger() });
    try {
      const store = new RunStore(spool, null);
      const totals = store.endedTotals();
      assert.equal(
        totals.ends.reduce((n, e) => n + e.runs, 0),
        count,
        `${open} open: every ended run, counted once`,
      );
      assert.deepEqual(await endLines(new AgentMetrics(sources(() => store.endedTotals()))), expected, `${open} open`);
      for (const fetcher of FETCHERS) {
        const finishes = runs
          .filter((r) => r.status === 'completed' && r.fetcher === fetcher && Number.isFinite(Date.parse(r.finishedAt ?? '')))
          .map((r) => r.finishedAt!);
        assert.equal(
          totals.ends.find((e) => e.fetcher === fetcher && e.status === 'completed')?.lastFinished,
          finishes.sort().at(-1),
          `${open} open: ${fetcher}'s last good finish`,
        );
      }
    } finally {
      spool.close();
    }
  }
});

test('every writer keeps the totals: an end counted once however often it is written, retention lowers nothing', async () => {
  const t = makeTestEnv(null);
  const file = path.join(t.root, 'spool.db');
  const spool = new Spool({ path: file, logger: memoryLogger() });
  try {
    const store = new RunStore(spool, null);
    const runs: StoredRun[] = [];
    for (let n = 0; n < 60; n++) {
      const end = ended(n);
      runs.push(end);
      // Waiting, running, then its end, and the end once more (a republished end).
      await store.save({ ...end, status: 'waiting', startedAt: null, finishedAt: null, exitCode: null, reason: null });
      if (end.startedAt) await store.save({ ...end, status: 'running', finishedAt: null, exitCode: null, reason: null });
      await store.save(end);
      await store.save(end);
    }
    // A writer that knows nothing of the totals (an older CLI on the same file): the triggers count its end.
    const older = new Database(file);
    older.pragma('busy_timeout = 10000');
    const late = { ...ended(61), fetcher: 'rfb-cnpj' };
    older.prepare(UPSERT_RUN).run(toRunRow({ ...late, status: 'running', finishedAt: null }));
    older.prepare(UPSERT_RUN).run(toRunRow(late));
    older.close();
    runs.push(late);
    const expected = await counted(runs);
    assert.deepEqual(await endLines(new AgentMetrics(sources(() => store.endedTotals()))), expected);
    const good = runs.filter((r) => r.status === 'completed' && r.fetcher === ended(7).fetcher && r.runId !== ended(7).runId);
    assert.equal(
      store.endedTotals().ends.find((e) => e.fetcher === ended(7).fetcher && e.status === 'completed')?.lastFinished,
      good
        .map((r) => r.finishedAt!)
        .sort()
        .at(-1),
      'a finish that is no time does not hide the last good one',
    );

    // Retention deletes the rows; the counters they added stay.
    const pruned = store.pruneEnded(new Date('2030-01-01T00:00:00Z'), 0, new Set());
    assert.ok(pruned > 0, 'retention deleted rows');
    assert.deepEqual(await endLines(new AgentMetrics(sources(() => store.endedTotals()))), expected, 'no counter lowered');
  } finally {
    spool.close();
  }
});
