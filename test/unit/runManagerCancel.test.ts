import assert from 'node:assert/strict';
import { test } from 'node:test';
import { managerBed, settle } from '../support/runFakes';

// Cancel at every step of a run's way, through the run manager on fake ports (test/support/runFakes.ts).

test('cancel while the run waits at the gate: cancelled, never spawned, no slot asked for', async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  const run = await bed.manager.enqueue('fetch', [], 'cli');
  await settle();
  assert.ok(bed.gate.waiting.has(run.runId));
  bed.manager.cancel(run.runId);
  const done = await bed.manager.waitRun(run.runId);
  assert.equal(done.status, 'cancelled');
  assert.equal(done.reason, 'cancelled');
  assert.equal(bed.slots.waiters.length, 0);
  assert.equal(bed.spawner.processes.length, 0);
  assert.deepEqual(bed.journal.statesOf(run.runId), ['waiting', 'cancelled(cancelled)']);
  assert.deepEqual(bed.journal.eventsOf(run.runId), ['cancel-requested', 'finish']);
  assert.deepEqual(bed.gate.ended, [run.runId], 'the gate releases what it reserved for the run');
});

test('cancel while the run waits for a slot: it leaves the queue, cancelled', async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  const run = await bed.pastGate();
  assert.equal(bed.slots.waiters.length, 1);
  bed.manager.cancel(run.runId);
  const done = await bed.manager.waitRun(run.runId);
  assert.equal(done.status, 'cancelled');
  assert.equal(bed.slots.waiters.length, 0, 'the run left the slot queue');
  assert.equal(bed.spawner.processes.length, 0);
  assert.equal(bed.slots.releasedCount, 0, 'no slot was taken, none is given back');
});

test('cancel between the slot grant and the spawn (the grant in the same turn): the slot goes straight back, no spawn', async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  const run = await bed.pastGate();
  bed.slots.grantNext(2);
  bed.manager.cancel(run.runId);
  const done = await bed.manager.waitRun(run.runId);
  assert.equal(done.status, 'cancelled');
  assert.equal(done.slot, null, 'a cancelled run that never started holds no slot');
  assert.deepEqual(bed.slots.closed, [2], 'the granted lock was closed');
  assert.equal(bed.slots.releasedCount, 1, 'and the pool told, so the next waiter is served');
  assert.equal(bed.spawner.processes.length, 0);
});

test('cancel while the `starting` intent is being committed: no spawn, slot given back once', async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  const run = await bed.pastGate();
  bed.journal.hold();
  bed.slots.grantNext(0);
  await settle();
  assert.equal(bed.manager.get(run.runId)?.reason, 'starting');
  bed.manager.cancel(run.runId);
  bed.journal.release();
  const done = await bed.manager.waitRun(run.runId);
  assert.equal(done.status, 'cancelled');
  assert.equal(bed.spawner.processes.length, 0, 'nothing was spawned after the cancel');
  assert.deepEqual(bed.slots.closed, [0]);
  assert.equal(bed.slots.releasedCount, 1);
  assert.deepEqual(bed.journal.statesOf(run.runId), ['waiting', 'waiting(starting)', 'cancelled(cancelled)']);
});

test('cancel while the spawn is under way: the process is recorded running, then its group is terminated', async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  const { run, letSpawn } = await bed.spawning(1);
  bed.manager.cancel(run.runId);
  letSpawn();
  await settle();
  const proc = bed.spawner.of(run.runId);
  assert.deepEqual(proc.signals, ['SIGTERM'], 'the cancel reached the process that was being spawned');
  assert.equal(bed.manager.get(run.runId)?.status, 'running');
  proc.exit({ exitCode: 143, signal: 'SIGTERM' });
  const done = await bed.manager.waitRun(run.runId);
  assert.equal(done.status, 'cancelled');
  assert.deepEqual(bed.journal.eventsOf(run.runId), ['cancel-requested', 'start', 'finish']);
});

test('cancel of a running run: SIGTERM to its group, cancelled once the group is gone, slot released', async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  const run = await bed.running(0);
  assert.equal(bed.manager.get(run.runId)?.status, 'running');
  bed.manager.cancel(run.runId);
  const proc = bed.spawner.of(run.runId);
  assert.deepEqual(proc.signals, ['SIGTERM']);
  assert.equal(bed.manager.get(run.runId)?.status, 'running', 'running until the group is gone');
  proc.exit({ exitCode: 143, signal: 'SIGTERM' });
  const done = await bed.manager.waitRun(run.runId);
  assert.equal(done.status, 'cancelled');
  assert.equal(done.exitCode, 143);
  assert.equal(bed.slots.releasedCount, 1);
  assert.deepEqual(bed.journal.statesOf(run.runId), ['waiting', 'waiting(starting)', 'running', 'cancelled(cancelled)']);
});

test('a run that starts at once: one state per move, start and finish events, published only after each commit', async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  bed.journal.hold();
  const enqueued = bed.manager.enqueue('fetch', ['a'], 'cli');
  await settle();
  assert.equal(bed.published.length, 0, 'nothing is published before its commit');
  bed.journal.release();
  const run = await enqueued;
  assert.equal(bed.published.length, 1);
  bed.gate.waiting.get(run.runId)!.open();
  await settle();
  bed.slots.grantNext(0);
  await settle();
  await settle();
  bed.spawner.of(run.runId).exit({ exitCode: 3, signal: null });
  const done = await bed.manager.waitRun(run.runId);
  assert.equal(done.status, 'failed');
  assert.equal(done.reason, 'exit-code');
  assert.deepEqual(bed.journal.statesOf(run.runId), ['waiting', 'waiting(starting)', 'running', 'failed(exit-code)']);
  assert.deepEqual(bed.journal.eventsOf(run.runId), ['start', 'finish']);
  assert.deepEqual(
    bed.published.map((r) => r.status),
    ['waiting', 'waiting', 'running', 'failed'],
  );
});
