import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { connectAgent } from '../../agent/client/agentClient';
import { makeTestEnv, openOrchestrator, runCli, startAgent, stopAll, testConfig } from '../support/harness';
import { waitFor } from '../support/waitFor';

// `sleep 600` is the fetcher (a long download), not the test waiting.
const long = (pool: 'heavy-io' | 'cpu-analysis') => [{ name: 'long', pool, argv: ['sleep', '600'] }];

/** True when the kernel lists a flock on the file now at `file` (read without opening or creating it). */
function kernelLocked(file: string): boolean {
  let ino: number;
  try {
    ino = fs.lstatSync(file).ino;
  } catch {
    return false;
  }
  return fs
    .readFileSync('/proc/locks', 'utf8')
    .split('\n')
    .some((l) => /FLOCK/.test(l) && !l.includes('->') && l.includes(`:${ino} `));
}

test('a lock folder removed before a run takes its slot leaks no slot: a 2-slot pool still runs 2', { timeout: 60000 }, async () => {
  const t = makeTestEnv(long('cpu-analysis'));
  const { orchestrator, runManager, close } = openOrchestrator(t);
  const poolDir = path.join(t.lockDir, 'cpu-analysis');
  try {
    // A tmp cleaner removes the folder between the agent's start and the run (ENOENT on the open).
    // maxRetries: the agent may re-create the folder while it is being removed (ENOTEMPTY), as with a real cleaner.
    fs.rmSync(t.lockDir, { recursive: true, force: true, maxRetries: 5, retryDelay: 20 });
    const first = await orchestrator.run('long', [], 'cli');
    await waitFor(() => runManager.get(first.runId)?.status !== 'waiting', { what: 'the first run to start or fail', timeoutMs: 10000 });
    // Whatever became of it, the folder is back (as a legacy script's mkdir -p would make it).
    fs.mkdirSync(poolDir, { recursive: true, mode: 0o700 });
    if (runManager.get(first.runId)!.status === 'running') {
      await orchestrator.cancel({ runId: first.runId });
      await orchestrator.waitRun(first.runId);
    }
    const runs = [await orchestrator.run('long', [], 'cli'), await orchestrator.run('long', [], 'cli')];
    await waitFor(() => runs.every((r) => runManager.get(r.runId)?.status === 'running'), {
      what: 'both slots to be usable again (none leaked to a failed waiter)',
      timeoutMs: 10000,
    });
  } finally {
    await stopAll(orchestrator, runManager);
    await close();
  }
});

test('a lock file that cannot be opened fails that run with a reason and leaks no slot', { timeout: 60000 }, async () => {
  const t = makeTestEnv(long('cpu-analysis'));
  const { orchestrator, runManager, close } = openOrchestrator(t);
  const blocker = path.join(t.lockDir, 'cpu-analysis', 'slot_0.lock');
  try {
    // A folder where slot 0's file should be: every open of it fails (EISDIR).
    fs.mkdirSync(blocker);
    const refused = await orchestrator.run('long', [], 'cli');
    const ended = await orchestrator.waitRun(refused.runId);
    assert.equal(ended.status, 'failed');
    assert.equal(ended.reason, 'lock-file-unsafe');
    fs.rmdirSync(blocker);
    const runs = [await orchestrator.run('long', [], 'cli'), await orchestrator.run('long', [], 'cli')];
    await waitFor(() => runs.every((r) => runManager.get(r.runId)?.status === 'running'), {
      what: 'both slots to be usable (none leaked to the failed waiter)',
      timeoutMs: 10000,
    });
    assert.deepEqual(runs.map((r) => runManager.get(r.runId)!.slot).sort(), [0, 1]);
  } finally {
    await stopAll(orchestrator, runManager);
    await close();
  }
});

test(
  'a tmp cleaner deleting the lock folder under 3 running fetchers never lets the 3-slot pool run a 4th',
  { timeout: 180000 },
  async () => {
    const t = makeTestEnv(long('heavy-io'));
    const agent = await startAgent(t);
    const client = await connectAgent(testConfig(t).connectionFile, { client: 'tmp-cleaner' });
    const poolDir = path.join(t.lockDir, 'heavy-io');
    const running = async () => (await client.listRuns(100)).filter((r) => r.status === 'running');
    try {
      const first = await Promise.all([0, 1, 2].map(() => client.run('long')));
      await waitFor(async () => (await running()).length === 3, { what: '3 fetchers to run', timeoutMs: 30000 });

      // systemd-tmpfiles (or rm -rf by hand) removes the whole folder while the 3 hold their slots.
      // maxRetries: the agent may re-create the folder while it is being removed (ENOTEMPTY), as with a real cleaner.
      fs.rmSync(t.lockDir, { recursive: true, force: true, maxRetries: 5, retryDelay: 20 });
      const pool = (await client.getSnapshot()).pools.find((p) => p.name === 'heavy-io')!;
      assert.equal(pool.used, 3, `slots must not show ${pool.used}/3 with 3 fetchers running`);
      assert.ok(
        pool.slots.slice(0, 3).every((s) => s.holder && !s.holder.foreign),
        'each slot names its run',
      );

      // A legacy script re-creates the folder; more runs arrive through the agent.
      fs.mkdirSync(poolDir, { recursive: true });
      const more = await Promise.all([0, 1].map(() => client.run('long')));
      await waitFor(
        async () => {
          const runs = await client.listRuns(100);
          return more.every((m) => runs.find((r) => r.runId === m.runId)?.wait?.kind === 'pool');
        },
        { what: 'the new runs to queue for a slot', timeoutMs: 15000 },
      );
      // The agent has re-made and re-locked the three files for its running fetchers.
      await waitFor(() => [0, 1, 2].every((i) => kernelLocked(path.join(poolDir, `slot_${i}.lock`))), {
        what: 'the re-created slot files to be locked',
        timeoutMs: 15000,
      });
      // A legacy flock and a CLI of another station on the same folder find the pool full.
      for (const i of [0, 1, 2]) {
        const r = spawnSync('flock', ['-n', path.join(poolDir, `slot_${i}.lock`), 'true']);
        assert.equal(r.status, 1, `flock got slot ${i} of a full pool`);
      }
      const other = makeTestEnv(long('heavy-io'), { CRON_POOL_HEAVY_IO_TIMEOUT: '2' }, { lockDir: t.lockDir });
      const cli = await runCli(other, ['run', 'long']);
      assert.equal(cli.code, 75, `the CLI must time out waiting (got ${cli.code}): ${cli.stderr}`);
      assert.equal((await running()).length, 3);
      for (const m of more) assert.equal((await client.listRuns(100)).find((r) => r.runId === m.runId)!.status, 'waiting');

      // When one of the first three ends, exactly one waiting run takes its place.
      await client.cancel({ runId: first[0].runId });
      await client.waitRun(first[0].runId);
      await waitFor(
        async () => {
          const runs = await client.listRuns(100);
          return more.some((m) => runs.find((r) => r.runId === m.runId)?.status === 'running');
        },
        { what: 'a waiting run to take the freed slot', timeoutMs: 15000 },
      );
      assert.equal((await running()).length, 3);
    } finally {
      // A run may end between the listing and its cancel: that is fine here.
      for (const r of await client.listRuns(100))
        if (r.status === 'running' || r.status === 'waiting') await client.cancel({ runId: r.runId }).catch(() => []);
      await client.close();
      agent.child.kill('SIGTERM');
    }
  },
);

test(
  'runs adopted by a new agent are guarded too: the folder removed after a kill -9 of the first agent still shows and keeps their slots',
  { timeout: 180000 },
  async () => {
    const t = makeTestEnv(long('heavy-io'));
    const first = await startAgent(t);
    let client = await connectAgent(testConfig(t).connectionFile, { client: 'tmp-cleaner' });
    await Promise.all([0, 1, 2].map(() => client.run('long')));
    await waitFor(async () => (await client.listRuns(100)).filter((r) => r.status === 'running').length === 3, {
      what: '3 fetchers to run',
      timeoutMs: 30000,
    });
    await client.close();
    first.child.kill('SIGKILL');
    await waitFor(() => first.child.exitCode !== null || first.child.signalCode !== null, { what: 'the first agent to die' });
    const second = await startAgent(t);
    client = await connectAgent(testConfig(t).connectionFile, { client: 'tmp-cleaner' });
    try {
      await waitFor(async () => (await client.listRuns(100)).filter((r) => r.status === 'running').length === 3, {
        what: 'the new agent to adopt the 3 runs',
        timeoutMs: 30000,
      });
      // The new agent has looked at its pools once (a snapshot), then the tmp cleaner strikes.
      assert.equal((await client.getSnapshot()).pools.find((p) => p.name === 'heavy-io')!.used, 3);
      // maxRetries: the agent may re-create the folder while it is being removed (ENOTEMPTY), as with a real cleaner.
      fs.rmSync(t.lockDir, { recursive: true, force: true, maxRetries: 5, retryDelay: 20 });
      assert.equal((await client.getSnapshot()).pools.find((p) => p.name === 'heavy-io')!.used, 3, 'adopted holders still show');
      await waitFor(() => [0, 1, 2].every((i) => kernelLocked(path.join(t.lockDir, 'heavy-io', `slot_${i}.lock`))), {
        what: 'the slot files to be re-made and locked',
        timeoutMs: 15000,
      });
      const extra = await client.run('long');
      await waitFor(async () => (await client.listRuns(100)).find((r) => r.runId === extra.runId)?.wait?.kind === 'pool', {
        what: 'a 4th run to queue',
        timeoutMs: 15000,
      });
      assert.equal((await client.listRuns(100)).filter((r) => r.status === 'running').length, 3);
    } finally {
      // A run may end between the listing and its cancel: that is fine here.
      for (const r of await client.listRuns(100))
        if (r.status === 'waiting' || r.status === 'running') await client.cancel({ runId: r.runId }).catch(() => []);
      await client.close();
      second.child.kill('SIGTERM');
    }
  },
);
