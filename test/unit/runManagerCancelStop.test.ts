import assert from 'node:assert/strict';
import { test } from 'node:test';
import { managerBed } from '../support/runFakes';

// A cancel the agent has sent but whose run ends after the agent stopped: what the run manager leaves
// in the run's durable state for the agent that adopts it (test/agent/cancelAcrossRestart.test.ts).

/** The run as last committed. */
function lastCommit(bed: ReturnType<typeof managerBed>, runId: string) {
  const commits = bed.journal.commits.filter((c) => c.run.runId === runId);
  return commits[commits.length - 1].run;
}

test('cancel of a running run, then the agent stops before its end: the cancel is committed with the run', async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  const run = await bed.running(0);
  bed.manager.cancel(run.runId);
  assert.deepEqual(bed.spawner.of(run.runId).signals, ['SIGTERM']);
  assert.equal(lastCommit(bed, run.runId).cancelAsked, undefined, 'the request alone is an event, not a state');
  await bed.manager.shutdown(false);
  const kept = lastCommit(bed, run.runId);
  assert.deepEqual([kept.status, kept.reason, kept.cancelAsked], ['running', null, true]);
  assert.deepEqual(bed.journal.eventsOf(run.runId), ['start', 'cancel-requested']);
});

test('a running run not cancelled is left to the next agent as it was', async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  const run = await bed.running(0);
  const before = bed.journal.commits.length;
  await bed.manager.shutdown(false);
  assert.equal(bed.journal.commits.length, before, 'nothing more is committed');
  assert.equal(lastCommit(bed, run.runId).cancelAsked, undefined);
  assert.deepEqual(bed.spawner.of(run.runId).signals, []);
});

test('cancel while the spawn is under way, then the agent stops: the run starts with the cancel, and its group is terminated', async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  const { run, letSpawn } = await bed.spawning(1);
  bed.manager.cancel(run.runId);
  const stopped = bed.manager.shutdown(false);
  letSpawn();
  await stopped;
  const kept = lastCommit(bed, run.runId);
  assert.deepEqual([kept.status, kept.cancelAsked], ['running', true]);
  assert.deepEqual(
    bed.journal.statesOf(run.runId),
    ['waiting', 'waiting(starting)', 'running'],
    'one commit: the start carries the cancel',
  );
  assert.deepEqual(bed.spawner.of(run.runId).signals, ['SIGTERM']);
});
