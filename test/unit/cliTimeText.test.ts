import { afterEach, test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo, ScheduleStatus } from '../../shared/protocol';
import { formatScheduleTable } from '../../agent/cli/scheduleTable';
import { formatRunsTable } from '../../agent/cli/runsView';
import { moment, spanSince, spanUntil } from '../../agent/cli/timeText';

// Node re-reads TZ when it is assigned: each test sets the zone it shows, and the original comes back.
const originalTz = process.env.TZ;
afterEach(() => {
  if (originalTz === undefined) delete process.env.TZ;
  else process.env.TZ = originalTz;
});

const NOW = Date.parse('2026-12-01T18:00:00Z');

test('a moment is local time with the zone of that moment', () => {
  process.env.TZ = 'UTC';
  assert.equal(moment('2026-12-01T18:15:00Z'), '2026-12-01 18:15 UTC');
  process.env.TZ = 'America/Sao_Paulo';
  assert.equal(moment('2026-12-01T18:15:00Z'), '2026-12-01 15:15 -03');
  process.env.TZ = 'Asia/Kolkata';
  assert.equal(moment('2026-12-01T18:15:00Z'), '2026-12-01 23:45 +05:30');
  // Each moment says its own offset across a DST change (Berlin: +01 in winter, +02 in summer).
  process.env.TZ = 'Europe/Berlin';
  assert.equal(moment('2026-01-15T12:00:00Z'), '2026-01-15 13:00 +01');
  assert.equal(moment('2026-07-15T12:00:00Z'), '2026-07-15 14:00 +02');
  assert.equal(spanUntil('2026-12-01T18:15:00Z', NOW), '15 min');
  assert.equal(spanSince('2026-11-30T16:00:00Z', NOW), '26 h');
});

const schedule: ScheduleStatus = {
  paused: false,
  catchUp: false,
  entries: [
    {
      fetcher: 'comex',
      cron: '15 18 * * *',
      timezone: null,
      nextDue: '2026-12-01T18:15:00Z',
      paused: false,
      lastRunAt: '2026-11-30T18:15:00Z',
    },
    { fetcher: 'anac', cron: '0 1 * * *', timezone: 'UTC', nextDue: '2026-12-02T01:00:00Z', paused: true, lastRunAt: null },
    { fetcher: 'sidra', cron: null, timezone: null, nextDue: null, paused: false, lastRunAt: null },
  ],
};

test('the schedule shows moments in NEXT and LAST, spans in IN and AGO, and a footer that says what each count is', () => {
  process.env.TZ = 'America/Sao_Paulo';
  const table = formatScheduleTable(schedule, NOW);
  const lines = table.split('\n');
  assert.match(lines[0] ?? '', /^NEXT\s+IN\s+LAST\s+AGO\s+FETCHER\s+CRON$/);
  assert.match(table, /^2026-12-01 15:15 -03\s+15 min\s+2026-11-30 15:15 -03\s+23 h 45 min\s+comex\s+15 18 \* \* \*$/m);
  assert.match(table, /^paused\s+-\s+never\s+-\s+anac\s+0 1 \* \* \* \(UTC\)$/m);
  assert.match(table, /^not scheduled\s+-\s+never\s+-\s+sidra\s+-$/m);
  assert.match(
    table,
    /\n3 fetchers: 1 will run at their NEXT time, 1 paused, 1 without a schedule \(run by hand only\); catch-up off: times missed while no agent ran are skipped\.\n$/,
  );
  assert.doesNotMatch(table, /\d{4}-\d\d-\d\dT|\bago\b|\bPM\b|\bAM\b/, 'no ISO time, no "ago", no 12-hour clock');

  const whole = formatScheduleTable({ ...schedule, paused: true, catchUp: true }, NOW);
  assert.match(whole, /3 fetchers: 0 will run at their NEXT time, 2 paused \(the whole schedule is PAUSED\), 1 without a schedule/);
  assert.match(whole, /catch-up on: at start, a fetcher whose last run is older than its period runs once\./);
});

test('runs show when they started as a moment, in the zone of the machine', () => {
  const run: RunInfo = {
    runId: 'r1',
    fetcher: 'comex',
    pool: 'heavy-io',
    status: 'completed',
    trigger: 'schedule',
    args: [],
    enqueuedAt: '2026-12-01T17:59:00Z',
    startedAt: '2026-12-01T17:59:20Z',
    finishedAt: '2026-12-01T17:59:50Z',
    slot: 0,
    pid: 1,
    exitCode: 0,
    signal: null,
    reason: null,
    wait: null,
    logPath: null,
  };
  process.env.TZ = 'UTC';
  assert.match(formatRunsTable([run], false, NOW), /^r1\s+comex\s+heavy-io\s+completed\s+0\s+2026-12-01 17:59 UTC\s+30 s\s+schedule/m);
  process.env.TZ = 'America/Sao_Paulo';
  assert.match(formatRunsTable([run], false, NOW), /^r1\s+comex\s+heavy-io\s+completed\s+0\s+2026-12-01 14:59 -03\s+30 s\s+schedule/m);
});
