// Timeouts: a try that passes its deadline gets SIGTERM on its group (SIGKILL after the cancel grace),
// ends failed/timeout, and its slot serves the next run at once; CRON_POOL_<POOL>_RUN_TIMEOUT is the
// pool's default (the entry wins); retryOnTimeout makes a timeout retryable.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { FIXTURES, groupMembers, makeTestEnv, openOrchestrator, runCli, type TestEnv } from '../support/harness';
import { waitFor } from '../support/waitFor';

const HANG = path.join(FIXTURES, 'hangWithChild.sh');
const stations: TestEnv[] = [];
after(() => {
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

function alive(pid: number): boolean {
  try {
    return fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'Z';
  } catch {
    return false;
  }
}

test(
  'a hanging fetcher under timeoutSeconds 2 ends failed/timeout within seconds, its group gone, and the next run takes its slot',
  { timeout: 60000 },
  async () => {
    const root = makeTestEnv(null).root;
    const childPid = path.join(root, 'child.pid');
    const t = makeTestEnv(
      [
        { name: 'hang', pool: 'heavy-io', argv: [HANG, childPid], timeoutSeconds: 2 },
        { name: 'next', pool: 'heavy-io', argv: ['true'] },
      ],
      { CRON_POOL_HEAVY_IO_SLOTS: '1' },
    );
    stations.push(t, { root } as TestEnv);
    const { orchestrator, runManager, close } = openOrchestrator(t);
    try {
      const hang = await orchestrator.run('hang', [], 'cli');
      const running = await waitFor(
        () => {
          const r = runManager.get(hang.runId);
          return r?.status === 'running' && r.pid && fs.existsSync(childPid) ? r : null;
        },
        { what: 'the hanging run and its child', timeoutMs: 20000 },
      );
      assert.ok(running.deadline, 'a run under a timeout has its deadline');
      assert.ok(Math.abs(Date.parse(running.deadline) - Date.parse(running.startedAt!) - 2000) < 1000);
      const next = await orchestrator.run('next', [], 'cli');
      const child = Number(fs.readFileSync(childPid, 'utf8'));
      const end = await orchestrator.waitRun(hang.runId);
      assert.deepEqual([end.status, end.reason], ['failed', 'timeout']);
      const took = Date.parse(end.finishedAt!) - Date.parse(end.startedAt!);
      assert.ok(took >= 2000 && took < 10000, `ended ${took} ms after its start`);
      assert.deepEqual(groupMembers(running.pid!), [], 'no process of its group is left');
      assert.equal(alive(child), false, 'its child is gone too');
      const after = await orchestrator.waitRun(next.runId);
      assert.equal(after.status, 'completed', 'the next run took the slot');
      assert.ok(Date.parse(after.startedAt!) >= Date.parse(end.finishedAt!) - 50);
    } finally {
      await close();
    }
  },
);

test(
  "CRON_POOL_<POOL>_RUN_TIMEOUT applies to entries without their own; an entry's timeoutSeconds wins; retryOnTimeout retries a timeout",
  { timeout: 60000 },
  async () => {
    const root = makeTestEnv(null).root;
    const counter = path.join(root, 'tries');
    const t = makeTestEnv(
      [
        { name: 'pool-default', pool: 'cpu-analysis', argv: ['sleep', '1000'] },
        { name: 'own', pool: 'cpu-analysis', argv: ['sh', '-c', 'sleep 3; exit 0'], timeoutSeconds: 0 },
        {
          name: 'retried',
          pool: 'network-light',
          argv: ['sh', '-c', 'echo x >> "$0"; sleep 1000', counter],
          timeoutSeconds: 1,
          retryOnTimeout: true,
          retry: { attempts: 2, backoffSeconds: 0 },
        },
      ],
      { CRON_POOL_CPU_ANALYSIS_RUN_TIMEOUT: '1' },
    );
    stations.push(t, { root } as TestEnv);
    const { orchestrator, close } = openOrchestrator(t);
    try {
      const [byPool, own, retried] = await Promise.all(['pool-default', 'own', 'retried'].map((f) => orchestrator.run(f, [], 'cli')));
      const [a, b, c] = await Promise.all([byPool, own, retried].map((r) => orchestrator.waitRun(r.runId)));
      assert.deepEqual([a.status, a.reason], ['failed', 'timeout'], 'the pool default stops it');
      assert.deepEqual([b.status, b.exitCode], ['completed', 0], 'timeoutSeconds 0 on the entry: no timeout');
      assert.deepEqual([c.status, c.reason, c.attempt], ['failed', 'timeout', 2], 'retried once after its timeout, then failed');
      assert.equal(fs.readFileSync(counter, 'utf8').trim().split('\n').length, 2);
    } finally {
      await close();
    }
  },
);

test('a `quantilica run` that times out is shown in words with its time', { timeout: 60000 }, async () => {
  const t = makeTestEnv([{ name: 'hang', pool: 'heavy-io', argv: ['sleep', '1000'], timeoutSeconds: 1 }]);
  stations.push(t);
  const r = await runCli(t, ['run', 'hang']);
  assert.notEqual(r.code, 0);
  assert.match(r.stdout, /failed/);
  const table = await runCli(t, ['runs']);
  assert.match(table.stdout, /timed out at \d\d:\d\d:\d\d/);
});
