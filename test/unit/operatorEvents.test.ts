import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { Change, OperatorEvent, RunInfo, ScheduleStatus } from '../../shared/protocol';
import { OperatorEvents } from '../../agent/events/operatorEvents';

const AT = new Date('2026-03-02T10:00:00Z');

function run(over: Partial<RunInfo>): RunInfo {
  return {
    runId: 'r1',
    fetcher: 'comex',
    pool: 'heavy-io',
    status: 'running',
    trigger: 'schedule',
    args: [],
    enqueuedAt: AT.toISOString(),
    startedAt: AT.toISOString(),
    finishedAt: null,
    slot: 0,
    pid: 100,
    exitCode: null,
    signal: null,
    reason: null,
    wait: null,
    logPath: '/data/logs/r1.log',
    attempt: 1,
    attempts: 3,
    ...over,
  };
}

const runChange = (r: RunInfo): Change => ({ kind: 'run', run: r });
const names = (events: OperatorEvent[]) => events.map((e) => e.event);

function derivation(lastOutcomes?: Map<string, 'completed' | 'failed'>) {
  const events = new OperatorEvents({ poolOf: (f) => (f === 'comex' ? 'heavy-io' : null), lastOutcomes, now: () => AT });
  return (change: Change) => events.derive(change);
}

test("a retry backoff, a stall and a timeout each give their event once, with the run's variables", () => {
  const derive = derivation();
  assert.deepEqual(names(derive(runChange(run({ status: 'waiting', reason: null, wait: { kind: 'pool', position: 1 } })))), []);
  assert.deepEqual(names(derive(runChange(run({})))), []);
  const retrying = derive(
    runChange(
      run({ status: 'waiting', reason: 'retry-backoff', exitCode: 75, wait: { kind: 'retry', until: '2026-03-02T10:01:00Z', attempt: 2 } }),
    ),
  );
  assert.deepEqual(retrying, [
    {
      event: 'retrying',
      at: AT.toISOString(),
      runId: 'r1',
      fetcher: 'comex',
      pool: 'heavy-io',
      exitCode: 75,
      reason: 'retry-backoff',
      attempt: 1,
      logPath: '/data/logs/r1.log',
    },
  ]);
  // The backoff's state published again (a position or usage update): no second event.
  assert.deepEqual(
    names(
      derive(
        runChange(
          run({
            status: 'waiting',
            reason: 'retry-backoff',
            exitCode: 75,
            wait: { kind: 'retry', until: '2026-03-02T10:01:00Z', attempt: 2 },
          }),
        ),
      ),
    ),
    [],
  );
  assert.deepEqual(names(derive(runChange(run({ attempt: 2 })))), []);
  assert.deepEqual(names(derive(runChange(run({ attempt: 2, stalledSince: '2026-03-02T10:05:00Z' })))), ['stalled']);
  assert.deepEqual(
    names(derive(runChange(run({ attempt: 2, stalledSince: '2026-03-02T10:05:00Z', memoryMb: 12 })))),
    [],
    'still stalled: told once',
  );
  const ended = derive(
    runChange(run({ attempt: 2, status: 'failed', reason: 'timeout', signal: 'SIGTERM', finishedAt: AT.toISOString() })),
  );
  assert.deepEqual(names(ended), ['failed', 'timeout']);
  assert.equal(ended[1].attempt, 2);
  assert.equal(ended[1].reason, 'timeout');
  assert.deepEqual(
    names(derive(runChange(run({ attempt: 2, status: 'failed', reason: 'timeout' })))),
    [],
    'a republished end is no new event',
  );
});

test('recovered is the first success after a failure, also across an agent restart', () => {
  const derive = derivation();
  assert.deepEqual(names(derive(runChange(run({ runId: 'a', status: 'completed', exitCode: 0 })))), []);
  assert.deepEqual(names(derive(runChange(run({ runId: 'b', status: 'failed', exitCode: 1, reason: 'exit-code' })))), ['failed']);
  assert.deepEqual(names(derive(runChange(run({ runId: 'c', status: 'cancelled', reason: 'cancelled' })))), [], 'a cancel is no outcome');
  assert.deepEqual(names(derive(runChange(run({ runId: 'd', status: 'completed', exitCode: 0 })))), ['recovered']);
  assert.deepEqual(names(derive(runChange(run({ runId: 'e', status: 'completed', exitCode: 0 })))), []);
  // A new agent knows the last outcome from the run store.
  const next = derivation(new Map([['comex', 'failed']]));
  assert.deepEqual(names(next(runChange(run({ runId: 'f', status: 'completed', exitCode: 0 })))), ['recovered']);
});

test('the disk gate, the GitHub sync and the schedule give theirs', () => {
  const derive = derivation();
  const disk = (state: 'ok' | 'warn' | 'paused' | 'unknown'): Change => ({
    kind: 'disk',
    disk: {
      state,
      path: '/d',
      freeGb: 1,
      totalGb: 2,
      warnGb: 1,
      pauseGb: 1,
      resumeGb: 1,
      next: null,
      error: null,
      checkedAt: AT.toISOString(),
    },
  });
  assert.deepEqual(names(derive(disk('ok'))), []);
  assert.deepEqual(names(derive(disk('paused'))), ['disk-paused']);
  assert.deepEqual(names(derive(disk('paused'))), []);
  assert.deepEqual(names(derive(disk('unknown'))), [], 'a failed probe is no resume');
  assert.deepEqual(names(derive(disk('paused'))), [], 'unknown after paused kept the gate shut: not paused anew');
  assert.deepEqual(names(derive(disk('warn'))), ['disk-resumed']);

  const sync = (over: Partial<RunInfo>) => runChange(run({ runId: 's1', fetcher: 'github', pool: 'network-light', ...over }));
  assert.deepEqual(
    names(derive(sync({ status: 'waiting', reason: 'hibernating', wait: { kind: 'hibernating', until: '2026-03-02T11:00:00Z' } }))),
    ['sync-hibernated'],
  );
  assert.deepEqual(names(derive(sync({}))), []);
  assert.deepEqual(names(derive(sync({ status: 'completed', reason: 'repos-not-reached', exitCode: 0 }))), ['sync-not-reached']);

  const schedule = (lateSince: string | null): Change => ({
    kind: 'schedule',
    schedule: {
      paused: false,
      catchUp: true,
      entries: [
        {
          fetcher: 'comex',
          cron: '0 * * * *',
          timezone: null,
          nextDue: null,
          paused: false,
          lastRunAt: null,
          lateAfterMinutes: 10,
          lateSince,
          lastSuccessAt: null,
        },
      ],
    } satisfies ScheduleStatus,
  });
  assert.deepEqual(names(derive(schedule(null))), []);
  const late = derive(schedule('2026-03-02T10:10:00.000Z'));
  assert.deepEqual(
    late.map((e) => [e.event, e.fetcher, e.pool, e.at]),
    [['late', 'comex', 'heavy-io', '2026-03-02T10:10:00.000Z']],
  );
  assert.deepEqual(names(derive(schedule('2026-03-02T10:10:00.000Z'))), []);
  assert.deepEqual(names(derive(schedule(null))), []);
  assert.deepEqual(names(derive(schedule('2026-03-02T11:10:00.000Z'))), ['late'], 'late again after a success: a new event');
});
