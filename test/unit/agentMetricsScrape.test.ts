import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { AgentMetrics, type MetricsSources } from '../../agent/metrics/agentMetrics';
import type { RunInfo, ScheduleStatus } from '../../shared/protocol';

// A scrape reads what is in memory: the run store once at start, the schedule as published, the pools
// once a scrape; and what it says still moves with each run end and each published schedule.

function sources() {
  const calls = { finished: 0, schedule: 0, pools: 0 };
  const schedule = (late: boolean): ScheduleStatus => ({
    paused: false, catchUp: false,
    entries: [{ fetcher: 'nightly', cron: '0 3 * * *', timezone: null, nextDue: null, paused: false, lastRunAt: null, lateAfterMinutes: 60, lateSince: late ? '2026-01-01T04:00:00.000Z' : null }],
  });
  const s: MetricsSources = {
    version: '1.2.3',
    pools: () => { calls.pools += 1; return [{ name: 'heavy-io', size: 3, used: 1, waiting: 0, waitTimeoutSeconds: 60, slots: [] }]; },
    activeRuns: () => [],
    schedule: () => { calls.schedule += 1; return schedule(false); },
    disk: () => null,
    spool: () => null,
    sync: () => null,
    githubTotals: () => null,
    finished: () => { calls.finished += 1; return [{ fetcher: 'nightly', status: 'completed', startedAt: '2026-01-01T03:00:00.000Z', finishedAt: '2026-01-01T03:00:10.000Z', attempt: 1 }]; },
  };
  return { s, calls, schedule };
}

const sample = (text: string, name: string, labels: string): number | null => {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  return line === undefined ? null : Number(line.slice(line.lastIndexOf(' ') + 1));
};

function ended(runId: string, finishedAt: string): RunInfo {
  return { runId, fetcher: 'nightly', pool: 'heavy-io', status: 'completed', trigger: 'schedule', args: [], enqueuedAt: finishedAt, startedAt: finishedAt, finishedAt,
    slot: 0, pid: 1, exitCode: 0, signal: null, reason: null, wait: null, logPath: null, attempt: 1, attempts: 1 };
}

test('scrapes read the run store only at start, the schedule only until one is published, the pools once each', async () => {
  const { s, calls, schedule } = sources();
  const metrics = new AgentMetrics(s);
  let text = await metrics.text();
  assert.equal(sample(text, 'quantilica_runs_finished_total', 'fetcher="nightly",outcome="completed"'), 1);
  assert.equal(sample(text, 'quantilica_fetcher_late', 'fetcher="nightly"'), 0);
  assert.equal(sample(text, 'quantilica_fetcher_last_success_timestamp_seconds', 'fetcher="nightly"'), Date.parse('2026-01-01T03:00:10.000Z') / 1000);
  assert.equal(sample(text, 'quantilica_pool_slots_used', 'pool="heavy-io"'), 1);
  for (let i = 0; i < 4; i++) text = await metrics.text();
  assert.deepEqual(calls, { finished: 1, schedule: 1, pools: 5 }, 'one pools read a scrape; the store and the schedule not again');

  // A published schedule and a run end move the figures, without reading the store or the schedule.
  metrics.observeSchedule(schedule(true));
  metrics.observe(ended('r2', '2026-01-02T03:00:10.000Z'));
  metrics.observe(ended('r2', '2026-01-02T03:00:10.000Z'));
  text = await metrics.text();
  assert.equal(sample(text, 'quantilica_fetcher_late', 'fetcher="nightly"'), 1);
  assert.equal(sample(text, 'quantilica_runs_finished_total', 'fetcher="nightly",outcome="completed"'), 2, 'a run counted once however often its end is published');
  assert.equal(sample(text, 'quantilica_run_duration_seconds_count', 'fetcher="nightly"'), 2);
  assert.equal(sample(text, 'quantilica_fetcher_last_success_timestamp_seconds', 'fetcher="nightly"'), Date.parse('2026-01-02T03:00:10.000Z') / 1000);
  assert.deepEqual({ finished: calls.finished, schedule: calls.schedule }, { finished: 1, schedule: 1 });
  assert.equal((text.match(/^# TYPE quantilica_runs_finished_total /gm) ?? []).length, 1, 'each metric once in the text');
});
