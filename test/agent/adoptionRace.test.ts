// Two processes of one home that find the same run left behind at once (the next agent starting, a
// CLI following or cancelling a run) adopt it once: one takes it over, the other sees it owned by a
// live process. Both adopting would follow it twice and record its end twice.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { listRuns, makeTestEnv, openOrchestrator, runCli, startAgent, type TestEnv } from '../support/harness';
import { waitFor } from '../support/waitFor';
import { UNTIL_GO } from '../support/untilGo';

const stations: TestEnv[] = [];
after(() => {
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

test('two takeovers started together adopt a left-behind run once, and its end is recorded once', { timeout: 90000 }, async (t) => {
  const s = makeTestEnv([{ name: 'holder', pool: 'cpu-analysis', argv: UNTIL_GO }]);
  fs.mkdirSync(s.dataDir, { recursive: true });
  stations.push(s);
  const agent = await startAgent(s);
  t.after(() => {
    fs.writeFileSync(path.join(s.dataDir, 'go'), '');
    if (agent.child.exitCode === null) agent.child.kill('SIGKILL');
  });
  const started = await runCli(s, ['run', 'holder', '--detach', '--json']);
  assert.equal(started.code, 0, started.stderr);
  const { runId } = JSON.parse(started.stdout) as RunInfo;
  await waitFor(async () => (await listRuns(s)).find((r) => r.runId === runId)?.status === 'running', {
    what: 'the holder to run',
    timeoutMs: 30000,
  });
  // The agent dies; its fetcher lives on, its run left `running` by an owner that is gone.
  agent.child.kill('SIGKILL');
  await new Promise((resolve) => (agent.child.exitCode !== null ? resolve(null) : agent.child.once('exit', resolve)));

  const first = openOrchestrator(s);
  const second = openOrchestrator(s);
  try {
    // Both read the runs left behind in the same turn: without a claim each would take the holder.
    await Promise.all([first.runManager.adoptLeftovers(), second.runManager.adoptLeftovers()]);
    const adopters = [first, second].filter((o) => o.runManager.isOwnRun(runId));
    assert.equal(adopters.length, 1, 'exactly one of the two took the run over');

    fs.writeFileSync(path.join(s.dataDir, 'go'), '');
    const ended = await adopters[0].orchestrator.waitRun(runId);
    assert.equal(ended.status, 'completed');
    const finishes = first.spool.readBatch(100000).filter((e) => e.runId === runId && e.event === 'finish');
    assert.equal(finishes.length, 1, `one finish event for the run: ${JSON.stringify(finishes.map((f) => f.payload))}`);
  } finally {
    await first.close();
    await second.close();
  }
});
