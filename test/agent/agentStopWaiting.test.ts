import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { memoryLogger } from '../support/memoryLogger';
import { Spool } from '../../agent/telemetry/spool';
import { groupMembers, makeTestEnv, runCli, startAgent } from '../support/harness';
import { waitFor } from '../support/waitFor';

test('an agent stop ends every waiting run cancelled (agent-stopping) in state and telemetry; running fetchers go on', { timeout: 90000 }, async () => {
  const t = makeTestEnv([{ name: 'long', pool: 'cpu-analysis', argv: ['sleep', '300'] }], { CRON_POOL_CPU_ANALYSIS_SLOTS: '1' });
  const agent = await startAgent(t);
  let holderPid: number | null = null;
  try {
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) {
      const r = await runCli(t, ['run', 'long', '--detach', '--json']);
      assert.equal(r.code, 0, r.stderr);
      ids.push((JSON.parse(r.stdout) as RunInfo).runId);
    }
    const runs = async (): Promise<RunInfo[]> => (JSON.parse((await runCli(t, ['runs', '--json'])).stdout) as { runs: RunInfo[] }).runs;
    const before = await waitFor(async () => {
      const all = await runs();
      const [holder, waiting] = ids.map((id) => all.find((r) => r.runId === id));
      return holder?.status === 'running' && waiting?.wait?.kind === 'pool' ? holder : null;
    }, { what: 'one run holding the only slot and one waiting for it', timeoutMs: 20000 });
    holderPid = before.pid;

    agent.child.kill('SIGTERM');
    const code = await new Promise<number | null>((resolve) => agent.child.once('exit', resolve));
    assert.equal(code, 0);

    // No agent now: the CLI reads the state the stopped agent left.
    const after = await runs();
    const [holder, waiting] = ids.map((id) => after.find((r) => r.runId === id)!);
    assert.deepEqual([waiting.status, waiting.reason], ['cancelled', 'agent-stopping']);
    assert.equal(holder.status, 'running', 'a running fetcher goes on after the agent stops');
    assert.ok(groupMembers(holderPid!).length > 0);

    const config = { spool: path.join(t.home, '.quantilica', 'telemetry_spool.db') };
    assert.ok(fs.existsSync(config.spool));
    const spool = new Spool({ path: config.spool, logger: memoryLogger(), fallbackPath: path.join(t.root, 'fallback.db') });
    try {
      const events = spool.readBatch(10000).filter((e) => e.runId === waiting.runId);
      const finish = events.filter((e) => e.event === 'finish');
      assert.equal(finish.length, 1, `one finish event for the waiting run: ${events.map((e) => e.event).join(', ')}`);
      const payload = JSON.parse(finish[0].payload) as { status: string; reason: string };
      assert.deepEqual([payload.status, payload.reason], ['cancelled', 'agent-stopping']);
    } finally {
      spool.close();
    }
  } finally {
    if (agent.child.exitCode === null) agent.child.kill('SIGKILL');
    if (holderPid) {
      try {
        process.kill(-holderPid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    }
  }
});
