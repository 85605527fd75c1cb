import * as fs from 'node:fs';
import { spawn } from 'node:child_process';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { makeTestEnv, openOrchestrator, stopAll } from '../support/harness';
import { waitFor } from '../support/waitFor';

test(
  'the fetcher holds the slot on fd 3 (spawn clears close-on-exec there), the agent keeps no copy, and the files are private',
  { timeout: 60000 },
  async () => {
    const t = makeTestEnv([{ name: 'long', pool: 'heavy-io', argv: ['sleep', '600'] }]);
    const { orchestrator, runManager, close } = openOrchestrator(t);
    try {
      const run = await orchestrator.run('long', [], 'cli');
      await waitFor(() => runManager.get(run.runId)?.status === 'running', { what: 'the run to start' });
      const { pid, slot } = runManager.get(run.runId)!;
      const lockPath = path.join(t.lockDir, 'heavy-io', `slot_${slot}.lock`);
      const lock = fs.statSync(lockPath);
      // The wrapper (and its fetcher) have the lock file as fd 3 after exec.
      const fd3 = fs.statSync(`/proc/${pid}/fd/3`);
      assert.equal(fd3.ino, lock.ino);
      assert.equal(fd3.dev, lock.dev);
      // This process (the orchestrator) closed its own copy: the slot lives with the run alone.
      const own = fs.readdirSync('/proc/self/fd').filter((fd) => {
        try {
          const s = fs.statSync(`/proc/self/fd/${fd}`);
          return s.ino === lock.ino && s.dev === lock.dev;
        } catch {
          return false;
        }
      });
      assert.deepEqual(own, []);
      assert.equal(lock.mode & 0o7777, 0o600);
      assert.equal(fs.statSync(path.dirname(lockPath)).mode & 0o7777, 0o700);
      assert.equal(fs.statSync(t.lockDir).mode & 0o7777, 0o700);
      assert.match(fs.readFileSync(lockPath, 'utf8'), new RegExp(`"runId":"${run.runId}"`));
    } finally {
      await stopAll(orchestrator, runManager);
      await close();
    }
  },
);

test(
  'a slot this agent still holds is its own, also once its run has left the active set (between the run’s end and the release): never “another process”',
  { timeout: 60000 },
  async () => {
    const t = makeTestEnv([{ name: 'long', pool: 'heavy-io', argv: ['sleep', '600'] }]);
    const { orchestrator, runManager, pools, close } = openOrchestrator(t);
    try {
      const run = await orchestrator.run('long', [], 'cli');
      await waitFor(() => runManager.get(run.runId)?.status === 'running', { what: 'the run to start' });
      const { slot } = runManager.get(run.runId)!;
      const pool = pools.get('heavy-io')!;
      // The pool is asked as it is in that moment: the run is no longer one of the agent's active runs.
      const holder = pool.state(() => false).find((s) => s.index === slot)?.holder;
      assert.equal(holder?.runId, run.runId);
      assert.equal(holder?.foreign, false);
      // A lock this agent does not hold is still shown as another process's.
      const other = path.join(t.lockDir, 'heavy-io', `slot_${slot === 0 ? 1 : 0}.lock`);
      // Its own group, killed whole: flock(1) forks its command, which would outlive flock alone.
      const legacy = spawn('flock', ['-x', other, 'sleep', '600'], { stdio: 'ignore', detached: true });
      try {
        const foreign = await waitFor(() => pool.state(() => false).find((s) => s.index === (slot === 0 ? 1 : 0))?.holder ?? undefined, {
          what: 'the legacy flock to show',
        });
        assert.equal(foreign.foreign, true);
      } finally {
        process.kill(-legacy.pid!, 'SIGKILL');
      }
    } finally {
      await stopAll(orchestrator, runManager);
      await close();
    }
  },
);
