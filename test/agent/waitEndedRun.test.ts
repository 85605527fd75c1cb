import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { UnknownRunError } from '../../agent/errors';
import { makeTestEnv, openOrchestrator, stopAll } from '../support/harness';
import { waitFor } from '../support/waitFor';

test('waiting for a run that has already ended answers it from one read of the store, as it ended', { timeout: 30000 }, async () => {
  const t = makeTestEnv([{ name: 'quick', pool: 'network-light', argv: ['true'] }]);
  const { orchestrator, runManager, store, close } = openOrchestrator(t);
  try {
    const run = await orchestrator.run('quick', [], 'cli');
    const ended = await orchestrator.waitRun(run.runId);
    assert.equal(ended.status, 'completed');
    await waitFor(() => !runManager.isOwnRun(run.runId), { what: 'the run to leave the active set' });
    const get = store.get.bind(store);
    let reads = 0;
    store.get = (runId: string) => {
      reads += 1;
      return get(runId);
    };
    assert.deepEqual(await orchestrator.waitRun(run.runId), ended, 'the same answer as at its end');
    assert.equal(reads, 1, 'one read of the store');
    await assert.rejects(orchestrator.waitRun('nosuch00-0123abcd'), UnknownRunError, 'an unknown run is still refused');
  } finally {
    await stopAll(orchestrator, runManager);
    await close();
  }
});
