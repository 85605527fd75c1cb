import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { AgentMetrics, type MetricsSources } from '../../agent/metrics/agentMetrics';
import type { RunInfo, ScheduleStatus } from '../../shared/protocol';

// A scrape reads what is in memory: the run store once at start, the schedule as published, the pools
// once a scrape; and what it says still moves with each run end and each published schedule.

function sources() {
  const calls = { finished: 0, schedule: 0, pools: 0 };
  const schedule = (late: boolean): ScheduleStatus => ({
    paused: false,
    catchUp: false,
    entries: [
      {
        fetcher: 'nightly',
        cron: '0 3 * * *',
        timezone: null,
        nextDue: null,
        paused: false,
        lastRunAt: null,
        lateAfterMinutes: 60,
        lateSince: late ? '2026-01-01T04:00:00.000Z' : null,
      },
    ],
  });
  const s: MetricsSources = {
    version: '1.2.3',
    pools: () => {
      calls.pools += 1;
      return [{ name: 'heavy-io', size: 3, used: 1, waiting: 0, waitTimeoutSeconds: 60, slots: [] }];
    },
    activeRuns: () => [],
    schedule: () => {
      calls.schedule += 1;
      return schedule(false);
    },
    disk: () => null,
    spool: () => null,
    sync: () => null,
    githubTotals: () => null,
    finished: () => {
      calls.finished += 1;
      return {
        ends: [{ fetcher: 'nightly', status: 'completed', runs: 1, retries: 0, lastFinished: '2026-01-01T03:00:10.000Z' }],
        durations: [{ fetcher: 'nightly', bucket: 2, runs: 1, seconds: 10 }],
      };
    },
  };
  return { s, calls, schedule };
}

const sample = (text: string, name: string, labels: string): number | null => {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  return line === undefined ? null : Number(line.slice(line.lastIndexOf(' ') + 1));
};

function ended(runId: string, finishedAt: string): RunInfo {
  return {
    runId,
    fetcher: 'nightly',
    pool: 'heavy-io',
    status: 'completed',
    trigger: 'schedule',
    args: [],
    enqueuedAt: finishedAt,
    startedAt: finishedAt,
    finishedAt,
    slot: 0,
    pid: 1,
    exitCode: 0,
    signal: null,
    reason: null,
    wait: null,
    logPath: null,
    attempt: 1,
    attempts: 1,
  };
}

test('scrapes read the run store only at start, the schedule only until one is published, the pools at most once a second', async () => {
  const { s, calls, schedule } = sources();
  let now = 1_000_000;
  const metrics = new AgentMetrics(s, () => now);
  let text = await metrics.text();
  assert.equal(sample(text, 'quantilica_runs_finished_total', 'fetcher="nightly",outcome="completed"'), 1);
  assert.equal(sample(text, 'quantilica_fetcher_late', 'fetcher="nightly"'), 0);
  assert.equal(
    sample(text, 'quantilica_fetcher_last_success_timestamp_seconds', 'fetcher="nightly"'),
    Date.parse('2026-01-01T03:00:10.000Z') / 1000,
  );
  assert.equal(sample(text, 'quantilica_pool_slots_used', 'pool="heavy-io"'), 1);
  for (let i = 0; i < 4; i++) text = await metrics.text();
  assert.deepEqual(
    calls,
    { finished: 1, schedule: 1, pools: 1 },
    'scrapes within a second share one pools read; the store and the schedule not again',
  );
  now += 1000;
  text = await metrics.text();
  assert.deepEqual(calls, { finished: 1, schedule: 1, pools: 2 }, 'a scrape a second later reads the pools again');

  // A published schedule and a run end move the figures, without reading the store or the schedule.
  metrics.observeSchedule(schedule(true));
  metrics.observe(ended('r2', '2026-01-02T03:00:10.000Z'));
  metrics.observe(ended('r2', '2026-01-02T03:00:10.000Z'));
  text = await metrics.text();
  assert.equal(sample(text, 'quantilica_fetcher_late', 'fetcher="nightly"'), 1);
  assert.equal(
    sample(text, 'quantilica_runs_finished_total', 'fetcher="nightly",outcome="completed"'),
    2,
    'a run counted once however often its end is published',
  );
  assert.equal(sample(text, 'quantilica_run_duration_seconds_count', 'fetcher="nightly"'), 2);
  assert.equal(
    sample(text, 'quantilica_fetcher_last_success_timestamp_seconds', 'fetcher="nightly"'),
    Date.parse('2026-01-02T03:00:10.000Z') / 1000,
  );
  assert.deepEqual({ finished: calls.finished, schedule: calls.schedule }, { finished: 1, schedule: 1 });
  assert.equal((text.match(/^# TYPE quantilica_runs_finished_total /gm) ?? []).length, 1, 'each metric once in the text');
  // The HTTP answer is the same text as bytes, and its kept run-end part follows the next run end.
  assert.equal((await metrics.body()).toString('utf8'), await metrics.text());
  metrics.observe(ended('r3', '2026-01-03T03:00:10.000Z'));
  assert.equal(
    sample((await metrics.body()).toString('utf8'), 'quantilica_runs_finished_total', 'fetcher="nightly",outcome="completed"'),
    3,
  );
  assert.equal((await metrics.body()).toString('utf8'), await metrics.text());
});

test('GitHub requests are counted by budget from the stored totals on: nothing before the store answered, a sync in the totals adds only what moved', async () => {
  const { s } = sources();
  let totals: ReturnType<MetricsSources['githubTotals']> = null;
  const counters = {
    records_collected: 0,
    records_created: 0,
    requests_made: 0,
    requests_saved: 0,
    hibernations: 0,
    requests_core: 0,
    requests_graphql: 0,
  };
  let sync: ReturnType<MetricsSources['sync']> = null;
  const shown = (id: string, core: number, graphql: number, hibernations: number) => {
    sync = {
      syncId: id,
      status: 'running',
      reason: null,
      startedAt: '2026-01-01T00:00:00.000Z',
      finishedAt: null,
      stages: {
        changes: { total: 1, done: 0, notReached: 0, notReachedRepos: [] },
        checks: { total: 1, done: 0, notReached: 0, notReachedRepos: [] },
      },
      hibernatingUntil: null,
      budget: null,
      quota: {},
      runId: null,
      fetcher: 'github',
      demo: false,
      counters: { ...counters, requests_made: core + graphql, requests_core: core, requests_graphql: graphql, hibernations },
    };
  };
  const metrics = new AgentMetrics({ ...s, githubTotals: () => totals, sync: () => sync });
  shown('new', 3, 4, 0);
  let text = await metrics.text();
  assert.equal(sample(text, 'quantilica_github_requests_total', 'budget="core"'), null, 'no requests sample before the store answered');
  assert.match(text, /^# TYPE quantilica_github_requests_total counter/m);

  // The store: an old sync and the one shown now, whose 10 + 20 requests are in the totals already.
  totals = {
    requests: { core: 110, graphql: 220 },
    hibernations: 3,
    syncs: [
      { id: 'new', requests: { core: 10, graphql: 20 }, hibernations: 1 },
      { id: 'old', requests: { core: 100, graphql: 200 }, hibernations: 2 },
    ],
  };
  shown('new', 10, 20, 1);
  text = await metrics.text();
  assert.deepEqual(
    [
      sample(text, 'quantilica_github_requests_total', 'budget="core"'),
      sample(text, 'quantilica_github_requests_total', 'budget="graphql"'),
    ],
    [110, 220],
  );
  assert.equal(Number(/^quantilica_github_hibernations_total (\d+)/m.exec(text)?.[1]), 3);
  shown('new', 15, 21, 2);
  text = await metrics.text();
  assert.deepEqual(
    [
      sample(text, 'quantilica_github_requests_total', 'budget="core"'),
      sample(text, 'quantilica_github_requests_total', 'budget="graphql"'),
    ],
    [115, 221],
  );
  shown('next', 7, 0, 0);
  await metrics.text();
  shown('next', 9, 1, 0);
  text = await metrics.text();
  assert.deepEqual(
    [
      sample(text, 'quantilica_github_requests_total', 'budget="core"'),
      sample(text, 'quantilica_github_requests_total', 'budget="graphql"'),
    ],
    [124, 222],
  );
  assert.equal(Number(/^quantilica_github_hibernations_total (\d+)/m.exec(text)?.[1]), 4);
});
