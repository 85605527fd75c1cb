// Lateness from the schedule and the run history: the schedule on a manual clock, the history in a
// real spool database (the run store the agent keeps), so "the agent was down across the due time"
// is one Schedule closed and another opened later on the same files.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Change, OperatorEvent, RunInfo, ScheduleEntry } from '../../shared/protocol';
import { OperatorEvents } from '../../agent/events/operatorEvents';
import { RunStore } from '../../agent/runs/runStore';
import { Schedule } from '../../agent/schedule/schedule';
import type { ScheduleTarget } from '../../agent/schedule/scheduleTarget';
import { Spool } from '../../agent/telemetry/spool';
import { ManualClock } from '../support/manualClock';
import { memoryLogger } from '../support/memoryLogger';
import { removeAtExit } from '../support/removeAtExit';
import { storedRun } from '../support/storedRun';

const at = (hhmm: string) => new Date(`2026-03-02T${hhmm}:00.000Z`);

function station() {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-late-'));
  removeAtExit(root);
  const logger = memoryLogger();
  const spool = new Spool({ path: path.join(root, 'spool.db'), logger, fallbackPath: path.join(root, 'fallback.db') });
  const store = new RunStore(spool, null, logger);
  let n = 0;
  /** A run of `fetcher` as the run manager would have saved it. */
  const record = (fetcher: string, status: RunInfo['status'], start: Date, end: Date) => {
    n += 1;
    const run = storedRun(
      { runId: `run-${n}`, fetcher, status, pool: 'heavy-io', pid: 1000 + n, startTime: 1, ownerPid: process.pid },
      start.toISOString(),
      (end.getTime() - start.getTime()) / 1000,
    );
    return store.save(run);
  };
  return { root, logger, spool, store, record };
}

/** The agent's side the schedule sees: the run history in the store; due runs are only noted (the test records their ends). */
function target(store: RunStore, due: string[]): ScheduleTarget {
  return {
    isActive: () => false,
    enqueue: (fetcher) => {
      due.push(fetcher);
    },
    recordSkipped: () => undefined,
    lastStartedAt: (f) => store.lastStartedAt(f),
    lastSucceededAt: (f) => store.lastSucceededAt(f),
    firstRecordedAt: (f) => store.firstRecordedAt(f),
  };
}

function openSchedule(s: ReturnType<typeof station>, clock: ManualClock, due: string[], changes: Change[]) {
  return new Schedule({
    fetchers: [
      { name: 'comex', schedule: '0 * * * *', timezone: 'UTC', lateAfterMinutes: 10 },
      { name: 'ibge', schedule: '30 * * * *', timezone: 'UTC' },
    ],
    target: target(s.store, due),
    logger: s.logger,
    homeDir: s.root,
    catchUp: false,
    clock,
    hub: { publish: (change) => changes.push(change) },
  });
}

const entry = (schedule: Schedule, fetcher = 'comex'): ScheduleEntry => {
  const e = schedule.status().entries.find((x) => x.fetcher === fetcher);
  assert.ok(e, fetcher);
  return e;
};

/** The late events the agent's derivation makes of the schedule's publications. */
function lateEvents(changes: Change[]): OperatorEvent[] {
  const events = new OperatorEvents({ poolOf: () => 'heavy-io' });
  return changes.flatMap((c) => events.derive(c)).filter((e) => e.event === 'late');
}

test('a due time without a completed run within lateAfterMinutes makes the entry late until its next success', async () => {
  const s = station();
  try {
    await s.record('comex', 'completed', at('09:00'), at('09:04'));
    const clock = new ManualClock(new Date(at('10:00').getTime() + 30_000));
    const due: string[] = [];
    const changes: Change[] = [];
    const schedule = openSchedule(s, clock, due, changes);
    schedule.start();
    assert.equal(entry(schedule).lateSince, null);
    assert.equal(entry(schedule).lastSuccessAt, at('09:04').toISOString());
    assert.equal(entry(schedule, 'ibge').lateAfterMinutes ?? null, null, 'no check: never late');

    // The 10:00 run fails at 10:03: not late yet, the deadline is 10:10.
    clock.advanceTo(at('10:03'));
    await s.record('comex', 'failed', at('10:00'), at('10:03'));
    schedule.refresh();
    clock.advanceTo(new Date(at('10:10').getTime() - 1000));
    assert.equal(entry(schedule).lateSince, null);
    // The deadline falls: the schedule's own timer publishes it (no run ended meanwhile).
    clock.advanceTo(new Date(at('10:10').getTime() + 1000));
    assert.equal(entry(schedule).lateSince, at('10:10').toISOString());
    assert.deepEqual(
      lateEvents(changes).map((e) => [e.fetcher, e.at]),
      [['comex', at('10:10').toISOString()]],
    );

    // A success (a run by hand at 10:20) clears it.
    clock.advanceTo(at('10:21'));
    await s.record('comex', 'completed', at('10:15'), at('10:20'));
    schedule.refresh();
    assert.equal(entry(schedule).lateSince, null);
    const last = changes.at(-1);
    assert.ok(
      last?.kind === 'schedule' && last.schedule.entries.find((e) => e.fetcher === 'comex')?.lateSince === null,
      'the cleared lateness is published',
    );
    // The 11:00 due time then counts: one run at 11:05 in time keeps it clear.
    clock.advanceTo(at('11:05'));
    await s.record('comex', 'completed', at('11:00'), at('11:05'));
    clock.advanceTo(at('11:30'));
    assert.equal(entry(schedule).lateSince, null);
    assert.equal(lateEvents(changes).length, 1);
    assert.ok(due.filter((f) => f === 'comex').length >= 1, 'the schedule fired its due runs');
    schedule.close();
  } finally {
    s.spool.close();
  }
});

test('an agent down across the due time: the next agent finds the entry late from the history', async () => {
  const s = station();
  try {
    await s.record('comex', 'completed', at('09:00'), at('09:04'));
    // The first agent runs 09:05–09:30 and stops: the 10:00 due time passes while no agent runs.
    const first = openSchedule(s, new ManualClock(at('09:05')), [], []);
    first.start();
    assert.equal(entry(first).lateSince, null);
    first.close();

    const changes: Change[] = [];
    const clock = new ManualClock(at('10:40'));
    const next = openSchedule(s, clock, [], changes);
    next.start();
    assert.equal(entry(next).lateSince, at('10:10').toISOString(), 'late since the 10:00 due time + 10 min');
    assert.deepEqual(
      lateEvents(changes).map((e) => e.at),
      [at('10:10').toISOString()],
      'its first publication says late',
    );

    // A paused entry is not late (the operator stopped it); resumed, it is late again.
    next.setPaused(true, 'comex');
    assert.equal(entry(next).lateSince, null);
    next.setPaused(false, 'comex');
    assert.equal(entry(next).lateSince, at('10:10').toISOString());

    // The next success clears it.
    await s.record('comex', 'completed', at('10:41'), at('10:45'));
    clock.advanceTo(at('10:46'));
    next.refresh();
    assert.equal(entry(next).lateSince, null);
    assert.equal(entry(next).lastSuccessAt, at('10:45').toISOString());
    next.close();
  } finally {
    s.spool.close();
  }
});

test('an entry that never completed counts from its first recorded run; lateAfterMinutes needs a schedule', async () => {
  const s = station();
  try {
    await s.record('comex', 'failed', at('08:00'), at('08:01'));
    const schedule = openSchedule(s, new ManualClock(at('09:30')), [], []);
    // First run recorded 08:00; first due time after it 09:00; late since 09:10.
    assert.equal(entry(schedule).lateSince, at('09:10').toISOString());
    assert.equal(entry(schedule).lastSuccessAt ?? null, null);
    assert.throws(
      () =>
        new Schedule({
          fetchers: [{ name: 'x', lateAfterMinutes: 5 }],
          target: target(s.store, []),
          logger: s.logger,
          homeDir: s.root,
          catchUp: false,
        }),
      /fetcher x: lateAfterMinutes needs a schedule/,
    );
  } finally {
    s.spool.close();
  }
});
