import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ChangedParams, PoolState, RunInfo, Snapshot } from '../../shared/protocol';
import { applyChange, MAX_FINISHED_RUNS, StateTracker } from '../../shared/stateTracker';

function snapshot(version: number): Snapshot {
  return {
    version,
    agent: { pid: 1, host: 'h', startedAt: '2026-01-01T00:00:00Z', protocolVersion: 1, mode: 'pools', dataDir: '/d', lockDir: '/l' },
    catalog: [],
    pools: [pool('heavy-io', 0)],
    runs: [],
    disk: null,
    spool: null,
    schedule: null,
  };
}

function pool(name: string, used: number): PoolState {
  return { name, size: 3, used, waiting: 0, waitTimeoutSeconds: 60, slots: [] };
}

function run(runId: string, status: RunInfo['status']): RunInfo {
  return {
    runId,
    fetcher: 'f',
    pool: 'heavy-io',
    status,
    trigger: 'protocol',
    args: [],
    enqueuedAt: '2026-01-01T00:00:00Z',
    startedAt: null,
    finishedAt: null,
    slot: null,
    pid: null,
    exitCode: null,
    signal: null,
    reason: null,
    wait: null,
    logPath: null,
  };
}

const change = (version: number, used: number): ChangedParams => ({ version, change: { kind: 'pool', pool: pool('heavy-io', used) } });

test('applyChange replaces a pool by name and leaves the input untouched', () => {
  const before = snapshot(4);
  const after = applyChange(before, change(5, 2));
  assert.equal(after.version, 5);
  assert.equal(after.pools[0]?.used, 2);
  assert.equal(before.pools[0]?.used, 0);
  assert.equal(before.version, 4);
});

test('applyChange upserts runs and keeps only the most recent finished ones', () => {
  let s = snapshot(0);
  s = applyChange(s, { version: 1, change: { kind: 'run', run: run('active', 'running') } });
  for (let i = 0; i < MAX_FINISHED_RUNS + 5; i++) {
    s = applyChange(s, { version: i + 2, change: { kind: 'run', run: run(`done-${i}`, 'completed') } });
  }
  assert.equal(s.runs.length, MAX_FINISHED_RUNS + 1);
  assert.ok(
    s.runs.some((r) => r.runId === 'active'),
    'an active run is never trimmed',
  );
  assert.equal(s.runs[0]?.runId, `done-${MAX_FINISHED_RUNS + 4}`);
  s = applyChange(s, { version: 999, change: { kind: 'run', run: run('active', 'completed') } });
  assert.equal(s.runs.filter((r) => r.runId === 'active').length, 1);
});

test('the tracker applies in order, ignores duplicates and reports a gap once', () => {
  const tracker = new StateTracker();
  assert.deepEqual(tracker.apply(change(1, 1)), { kind: 'held' }, 'before any snapshot changes are held');
  const reset = tracker.reset(snapshot(0));
  assert.deepEqual(
    reset.applied.map((p) => p.version),
    [1],
  );
  assert.equal(tracker.snapshot?.pools[0]?.used, 1);

  assert.equal(tracker.apply(change(2, 2)).kind, 'applied');
  assert.equal(tracker.apply(change(2, 2)).kind, 'duplicate');
  assert.equal(tracker.apply(change(1, 1)).kind, 'duplicate');
  assert.equal(tracker.snapshot?.version, 2);

  assert.deepEqual(tracker.apply(change(4, 4)), { kind: 'gap', expected: 3, received: 4 });
  assert.deepEqual(tracker.apply(change(5, 5)), { kind: 'held' }, 'a resynchronisation is under way: no second gap');

  // The snapshot fetched for the gap is at version 4: change 4 is in it, change 5 is applied on top.
  const resync = tracker.reset({ ...snapshot(4), pools: [pool('heavy-io', 4)] });
  assert.equal(resync.gap, false);
  assert.deepEqual(
    resync.applied.map((p) => p.version),
    [5],
  );
  assert.equal(tracker.snapshot?.version, 5);
  assert.equal(tracker.snapshot?.pools[0]?.used, 5);
});

test('held changes that skip a version ask for another snapshot and keep the rest', () => {
  const tracker = new StateTracker();
  tracker.apply(change(3, 3));
  tracker.apply(change(7, 7));
  tracker.apply(change(8, 8));
  const first = tracker.reset(snapshot(2));
  assert.equal(first.gap, true);
  assert.deepEqual(
    first.applied.map((p) => p.version),
    [3],
  );
  const second = tracker.reset(snapshot(6));
  assert.equal(second.gap, false);
  assert.deepEqual(
    second.applied.map((p) => p.version),
    [7, 8],
  );
  assert.equal(tracker.snapshot?.version, 8);
});
