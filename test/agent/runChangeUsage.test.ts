// A run's change carries its memory and CPU only when a client listens: the usage costs cgroup reads,
// and the agent's own observers (operator events, metrics) never read it.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { makeTestEnv, openOrchestrator, stopAll } from '../support/harness';
import { waitFor } from '../support/waitFor';

test("a running run's change has its usage with a client listening, and none with only the observers", async () => {
  const t = makeTestEnv([{ name: 'sleeper', pool: 'network-light', argv: ['sh', '-c', 'sleep 60'] }]);
  const { orchestrator, runManager, close } = openOrchestrator(t);
  const seen = new Map<string, RunInfo>();
  const stopObserving = orchestrator.hub.observe(({ change }) => {
    if (change.kind === 'run' && change.run.status === 'running') seen.set(change.run.runId, change.run);
  });
  const running = (runId: string) => waitFor(() => seen.get(runId) ?? null, { what: `${runId} to run` });
  try {
    assert.equal(orchestrator.hub.hasListeners(), false);
    const unwatched = await orchestrator.run('sleeper', [], 'cli');
    const quiet = await running(unwatched.runId);
    assert.equal(quiet.memorySource, undefined, 'no usage was read for a change nobody views');
    assert.equal(quiet.memoryMb, undefined);

    const client: RunInfo[] = [];
    const stopListening = orchestrator.hub.onChange(({ change }) => {
      if (change.kind === 'run') client.push(change.run);
    });
    try {
      const watched = await orchestrator.run('sleeper', [], 'cli');
      const viewed = await running(watched.runId);
      assert.ok(viewed.memorySource === 'cgroup' || viewed.memorySource === 'sampled', `usage read: ${viewed.memorySource}`);
      assert.equal(typeof viewed.peakMemoryMb, 'number');
      // The client and the observers see the same change.
      assert.ok(client.some((r) => r.runId === watched.runId && r.status === 'running' && r.memorySource === viewed.memorySource));
    } finally {
      stopListening();
    }
  } finally {
    stopObserving();
    await stopAll(orchestrator, runManager);
    await close();
  }
});
