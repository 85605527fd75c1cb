import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { memoryLogger } from '../support/memoryLogger';
import { Spool } from '../../agent/telemetry/spool';
import { groupMembers, makeTestEnv, startAgent } from '../support/harness';
import { holderAndWaiter } from '../support/holderAndWaiter';
import { waitFor } from '../support/waitFor';
import { UNTIL_GO } from '../support/untilGo';

// The fetcher runs until the test lets it end (a file in its data dir), with or without an agent.

// The stop of earlier versions, kept with --cancel-waiting-on-exit (and QUANTILICA_CANCEL_WAITING_ON_EXIT);
// by default the queue outlives the stop (agentQueueKept.test.ts).
for (const how of ['flag', 'setting'] as const)
  test(
    `with the ${how} to cancel waiting runs, an agent stop ends every waiting run cancelled (agent-stopping) in state and telemetry; running fetchers go on and the next agent finishes them`,
    { timeout: 120000 },
    async () => {
      const t = makeTestEnv([{ name: 'long', pool: 'cpu-analysis', argv: UNTIL_GO }], {
        CRON_POOL_CPU_ANALYSIS_SLOTS: '1',
        ...(how === 'setting' ? { QUANTILICA_CANCEL_WAITING_ON_EXIT: 'true' } : {}),
      });
      let agent = await startAgent(t, how === 'flag' ? ['--cancel-waiting-on-exit'] : []);
      let holderPid: number | null = null;
      try {
        const { ids, holder: before, runs } = await holderAndWaiter(t, 'long');
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

        // The next agent takes over the running run and records its end; the cancelled one stays as it was.
        agent = await startAgent(t);
        fs.mkdirSync(t.dataDir, { recursive: true });
        fs.writeFileSync(path.join(t.dataDir, 'go'), '');
        const ended = await waitFor(
          async () => {
            const found = (await runs()).find((r) => r.runId === holder.runId);
            return found?.status === 'completed' ? found : null;
          },
          { what: 'the next agent to finish the run the stopped one left running', timeoutMs: 30000 },
        );
        assert.equal(ended.exitCode, 0);
        agent.child.kill('SIGTERM');
        assert.equal(await new Promise<number | null>((resolve) => agent.child.once('exit', resolve)), 0);

        const config = { spool: path.join(t.home, '.quantilica', 'telemetry_spool.db') };
        assert.ok(fs.existsSync(config.spool));
        const spool = new Spool({ path: config.spool, logger: memoryLogger(), fallbackPath: path.join(t.root, 'fallback.db') });
        try {
          const events = spool.readBatch(10000).filter((e) => e.runId === waiting.runId);
          const finish = events.filter((e) => e.event === 'finish');
          assert.equal(finish.length, 1, `one finish event for the waiting run: ${events.map((e) => e.event).join(', ')}`);
          const payload = JSON.parse(finish[0].payload) as { status: string; reason: string };
          assert.deepEqual([payload.status, payload.reason], ['cancelled', 'agent-stopping']);
          const held = spool
            .readBatch(10000)
            .filter((e) => e.runId === holder.runId)
            .map((e) => e.event);
          assert.deepEqual(
            held.filter((e) => e === 'start' || e === 'finish'),
            ['start', 'finish'],
            `the running run's start, then its finish by the next agent: ${held.join(', ')}`,
          );
          const holderFinish = JSON.parse(
            spool.readBatch(10000).find((e) => e.runId === holder.runId && e.event === 'finish')!.payload,
          ) as { status: string; exitCode: number };
          assert.deepEqual([holderFinish.status, holderFinish.exitCode], ['completed', 0]);
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
    },
  );
