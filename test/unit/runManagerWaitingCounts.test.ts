import assert from 'node:assert/strict';
import { test } from 'node:test';
import { managerBed } from '../support/runFakes';

// A pool's picture counts its waiting runs from waitingCounts (no copy of each queued run): the count
// must be what the active runs say, at the gate, in the slot queue, and after a run leaves the queue.

test('waitingCounts counts the waiting runs of each pool as activeRuns lists them', async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  const fromActive = () => bed.manager.activeRuns().filter((r) => r.status === 'waiting').length;
  assert.deepEqual([...bed.manager.waitingCounts()], [], 'nothing waits in an idle agent');

  const running = await bed.running(0);
  const queued = await bed.pastGate();
  const atGate = await bed.manager.enqueue('fetch', [], 'cli');
  assert.equal(bed.manager.get(running.runId)?.status, 'running');
  assert.deepEqual([...bed.manager.waitingCounts()], [['heavy-io', 2]]);
  assert.equal(fromActive(), 2);

  bed.manager.cancel(atGate.runId);
  await bed.manager.waitRun(atGate.runId);
  assert.deepEqual([...bed.manager.waitingCounts()], [['heavy-io', 1]], 'a cancelled run no longer waits');
  assert.equal(fromActive(), 1);
  assert.equal(bed.manager.get(queued.runId)?.status, 'waiting');
});
