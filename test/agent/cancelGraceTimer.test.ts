import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { runMembers, signalRunGroup } from '../../agent/process/runGroup';
import { readProcInfo } from '../../shared/node/procInfo';
import { makeTestEnv, openOrchestrator, stopAll } from '../support/harness';
import { waitFor } from '../support/waitFor';

/**
 * Starts `sleep` as the leader of a new process group whose id is `pid`: the kernel hands out the
 * pid after /proc/sys/kernel/ns_last_pid (root only; CI runs as root), retried while other processes
 * of the machine take the number first.
 */
async function processWithPid(pid: number): Promise<ChildProcess> {
  for (let attempt = 0; attempt < 200; attempt++) {
    fs.writeFileSync('/proc/sys/kernel/ns_last_pid', String(pid - 1));
    const child = spawn('sleep', ['120'], { detached: true, stdio: 'ignore' });
    if (child.pid === pid) return child;
    child.kill('SIGKILL');
    await new Promise((resolve) => child.once('exit', resolve));
  }
  throw new Error(`could not start a process with pid ${pid}`);
}

test(
  'the cancel grace timer ends with its run: a process that later gets the pid as its group id is not killed',
  { timeout: 60000 },
  async () => {
    // Long enough to put the new process in place before the old timer would fire, even under load.
    const graceSeconds = 6;
    const t = makeTestEnv([{ name: 'sleeper', pool: 'network-light', argv: ['sleep', '300'] }], {
      QUANTILICA_CANCEL_GRACE_SECONDS: String(graceSeconds),
    });
    const { orchestrator, runManager, close } = openOrchestrator(t);
    let victim: ChildProcess | null = null;
    try {
      const run = await orchestrator.run('sleeper', [], 'cli');
      const running = await waitFor(
        () => {
          const r = runManager.get(run.runId);
          return r?.status === 'running' ? r : null;
        },
        { what: 'the run to start' },
      );
      const cancelledAt = Date.now();
      runManager.cancel(run.runId);
      // sleep dies of the SIGTERM at once: the run ends long before its grace period does.
      const ended = await orchestrator.waitRun(run.runId);
      assert.equal(ended.status, 'cancelled');
      assert.ok(Date.now() - cancelledAt < graceSeconds * 1000, 'the run ended within its grace period');

      victim = await processWithPid(running.pid!);
      assert.ok(
        Date.now() < cancelledAt + graceSeconds * 1000,
        'the new process was in place before the grace period ended (else this test proves nothing)',
      );
      let killedBy: NodeJS.Signals | null = null;
      victim.once('exit', (_code, signal) => {
        killedBy = signal;
      });
      // Proving that nothing happens takes waiting past the moment it would have: the grace period
      // since the cancel, plus a second of margin.
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, cancelledAt + graceSeconds * 1000 + 1000 - Date.now())));
      assert.equal(killedBy, null, `the process with the old group id was killed by ${String(killedBy)}`);
      assert.equal(victim.exitCode, null, 'the process with the old group id still runs');
    } finally {
      victim?.kill('SIGKILL');
      await stopAll(orchestrator, runManager);
      await close();
    }
  },
);

test(
  "a group is signalled only while it is provably the run's: its wrapper with its start time, or a member with the run id",
  { timeout: 30000 },
  async () => {
    const runId = 'mx00test-0123abcd';
    const stranger = spawn('sleep', ['120'], { detached: true, stdio: 'ignore' });
    const member = spawn('sleep', ['120'], { detached: true, stdio: 'ignore', env: { ...process.env, QUANTILICA_RUN_ID: runId } });
    try {
      await waitFor(() => readProcInfo(stranger.pid!) && readProcInfo(member.pid!), { what: 'both processes to exist' });
      const strangerStart = readProcInfo(stranger.pid!)!.startTime;
      // A recorded start time that does not match (the pid was reused) and no member with the run id.
      assert.deepEqual(runMembers({ runId, pgid: stranger.pid!, startTime: strangerStart + 1 }), []);
      assert.equal(signalRunGroup({ runId, pgid: stranger.pid!, startTime: strangerStart + 1 }, 'SIGKILL'), false);
      assert.equal(stranger.exitCode, null);
      assert.equal(stranger.signalCode, null);
      // The same group with the right start time is the run's.
      assert.deepEqual(runMembers({ runId, pgid: stranger.pid!, startTime: strangerStart }), [stranger.pid]);
      // A leader that is gone or not ours, but a member carrying the run id: still the run's.
      assert.deepEqual(runMembers({ runId, pgid: member.pid!, startTime: 1 }), [member.pid]);
      assert.deepEqual(runMembers({ runId: 'mx00test-ffffffff', pgid: member.pid!, startTime: 1 }), []);
      assert.equal(runMembers({ runId, pgid: 1, startTime: 0 }).length, 0, 'never group 1');
      assert.equal(signalRunGroup({ runId, pgid: member.pid!, startTime: 1 }, 'SIGKILL'), true);
      await waitFor(() => member.signalCode === 'SIGKILL', { what: 'the member to be killed' });
    } finally {
      stranger.kill('SIGKILL');
      member.kill('SIGKILL');
    }
  },
);
