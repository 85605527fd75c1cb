// What a retry policy never retries (a cancel, an exit 127, a memory-limit kill without retryMemoryLimit,
// an exit code it does not list), a cancel during the backoff, and bad policy values refused at start.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { FIXTURES, OUT_FIXTURES, makeTestEnv, openOrchestrator, runCli, type FetcherSpec, type TestEnv } from '../support/harness';
import { removeCgroupTree, uniqueCgroupName } from '../support/cgroups';
import { waitFor } from '../support/waitFor';

const FAIL_TIMES = path.join(FIXTURES, 'failTimesThenSucceed.sh');
const ALLOCATE = path.join(OUT_FIXTURES, 'allocateMemory.js');
const CGROUP = uniqueCgroupName('retry');
const stations: TestEnv[] = [];
after(() => {
  removeCgroupTree(CGROUP);
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

// Backoff 0: a wrong retry would come at once (and the run would not end as asserted).
const retry = { attempts: 3, backoffSeconds: 0 };

test(
  'never retried: a cancel, an exit 127, a memory-limit without retryMemoryLimit, an exit code the policy does not list; retried: a memory-limit with it',
  { timeout: 180000 },
  async () => {
    const root = makeTestEnv(null).root;
    const count = (name: string) => path.join(root, name);
    const tries = (name: string) => (fs.existsSync(count(name)) ? Number(fs.readFileSync(count(name), 'utf8').trim()) : 0);
    const counted = (name: string, then: string[]): string[] => [
      'sh',
      '-c',
      `n=$(( $(cat "$0" 2>/dev/null || echo 0) + 1 )); echo $n > "$0"; exec "$@"`,
      count(name),
      ...then,
    ];
    const fetchers: FetcherSpec[] = [
      { name: 'hang', pool: 'heavy-io', argv: counted('hang', ['sleep', '1000']), retry },
      { name: 'not-found', pool: 'heavy-io', argv: [FAIL_TIMES, count('not-found'), '9', '127'], retry },
      { name: 'not-listed', pool: 'heavy-io', argv: [FAIL_TIMES, count('not-listed'), '9', '1'], retry: { ...retry, exitCodes: [75] } },
      { name: 'oom', pool: 'heavy-io', argv: counted('oom', [process.execPath, ALLOCATE, '200']), memoryMb: 64, retry },
      {
        name: 'oom-retried',
        pool: 'heavy-io',
        argv: counted('oom-retried', [process.execPath, ALLOCATE, '200']),
        memoryMb: 64,
        retry: { attempts: 2, backoffSeconds: 0 },
        retryMemoryLimit: true,
      },
    ];
    const t = makeTestEnv(fetchers, { QUANTILICA_CGROUP_NAME: CGROUP });
    stations.push(t, { root } as TestEnv);
    const { orchestrator, runManager, close } = openOrchestrator(t);
    try {
      const hang = await orchestrator.run('hang', [], 'cli');
      await waitFor(() => runManager.get(hang.runId)?.status === 'running' && tries('hang') === 1, {
        what: 'the hanging run to start',
        timeoutMs: 20000,
      });
      runManager.cancel(hang.runId);
      const cancelled = await orchestrator.waitRun(hang.runId);
      assert.deepEqual([cancelled.status, cancelled.reason, cancelled.attempt], ['cancelled', 'cancelled', 1]);
      assert.equal(tries('hang'), 1, 'a cancel is never retried');

      for (const [name, code] of [
        ['not-found', 127],
        ['not-listed', 1],
      ] as const) {
        const end = await orchestrator.waitRun((await orchestrator.run(name, [], 'cli')).runId);
        assert.deepEqual([end.status, end.exitCode, end.attempt], ['failed', code, 1], name);
        assert.equal(tries(name), 1, `${name}: exit ${code} is not retried`);
      }

      const enforced = orchestrator.agentInfo().memory!;
      assert.notEqual(enforced.kind, 'not-enforced', `cgroups must be usable as root here (${enforced.reason ?? ''})`);
      const oom = await orchestrator.waitRun((await orchestrator.run('oom', [], 'cli')).runId);
      assert.deepEqual([oom.status, oom.reason, oom.attempt], ['failed', 'memory-limit', 1]);
      assert.equal(tries('oom'), 1, 'a memory-limit kill is not retried without retryMemoryLimit');
      const again = await orchestrator.waitRun((await orchestrator.run('oom-retried', [], 'cli')).runId);
      assert.deepEqual([again.status, again.reason, again.attempt, again.attempts], ['failed', 'memory-limit', 2, 2]);
      assert.equal(tries('oom-retried'), 2, 'with retryMemoryLimit it is');
    } finally {
      await close();
    }
  },
);

test('a cancel during the backoff ends the run cancelled, with no further try', { timeout: 60000 }, async () => {
  const counter = path.join(makeTestEnv(null).root, 'tries');
  const t = makeTestEnv([
    { name: 'flaky', pool: 'network-light', argv: [FAIL_TIMES, counter, '5', '75'], retry: { attempts: 3, backoffSeconds: 600 } },
  ]);
  stations.push(t);
  const { orchestrator, runManager, close } = openOrchestrator(t);
  try {
    const run = await orchestrator.run('flaky', [], 'cli');
    const backing = await waitFor(
      () => {
        const r = runManager.get(run.runId);
        return r?.reason === 'retry-backoff' ? r : null;
      },
      { what: 'the retry backoff', timeoutMs: 20000 },
    );
    assert.equal(backing.wait?.kind, 'retry');
    runManager.cancel(run.runId);
    const end = await orchestrator.waitRun(run.runId);
    assert.deepEqual([end.status, end.reason, end.attempt, end.exitCode], ['cancelled', 'cancelled', 1, 75]);
    assert.equal(fs.readFileSync(counter, 'utf8').trim(), '1');
  } finally {
    await close();
  }
});

test('bad policy values are refused at start (exit 78), each with its field named', { timeout: 120000 }, async () => {
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{ retry: { attempts: 0 } }, /fetchers\.0\.retry\.attempts/],
    [{ retry: { attempts: 21 } }, /fetchers\.0\.retry\.attempts/],
    [{ retry: { attempts: 3, backoffSeconds: -1 } }, /fetchers\.0\.retry\.backoffSeconds/],
    [
      { retry: { attempts: 3, backoffSeconds: 60, maxBackoffSeconds: 30 } },
      /fetchers\.0\.retry\.maxBackoffSeconds: must be at least the first delay/,
    ],
    [{ retry: { attempts: 3, exitCodes: [0] } }, /fetchers\.0\.retry\.exitCodes\.0/],
    [{ retry: { attempts: 3, tries: 2 } }, /fetchers\.0\.retry: Unrecognized key/],
    [{ retryOnTimeout: 'yes' }, /fetchers\.0\.retryOnTimeout/],
    [{ timeoutSeconds: -5 }, /fetchers\.0\.timeoutSeconds/],
    [{ stallSeconds: 0 }, /fetchers\.0\.stallSeconds/],
    [{ onStall: 'explode' }, /fetchers\.0\.onStall/],
  ];
  for (const [policy, field] of cases) {
    const t = makeTestEnv([{ name: 'x', pool: 'heavy-io', argv: ['true'], ...policy }]);
    stations.push(t);
    for (const command of [['status'], ['agent']]) {
      const r = await runCli(t, command);
      assert.equal(r.code, 78, `${JSON.stringify(policy)} (${command[0]}): ${r.stderr}`);
      assert.match(r.stderr, field);
      assert.match(r.stderr, /^quantilica: /);
    }
  }
  const t = makeTestEnv([{ name: 'x', pool: 'heavy-io', argv: ['true'] }], { CRON_POOL_HEAVY_IO_RUN_TIMEOUT: '-1' });
  stations.push(t);
  const r = await runCli(t, ['agent']);
  assert.equal(r.code, 78);
  assert.match(r.stderr, /CRON_POOL_HEAVY_IO_RUN_TIMEOUT/);
});
