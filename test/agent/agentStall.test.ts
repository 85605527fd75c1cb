// One agent per user across a stall. An agent stopped (SIGSTOP) for longer than the
// old lock's lease still holds the single-instance lock: a second agent is refused (exit 73), and the
// first goes on serving after SIGCONT.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { AGENT_JS, makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';

const stations: TestEnv[] = [];
after(() => {
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

/** Runs a second `quantilica agent` to its end (it must not start). */
function secondAgent(s: TestEnv): Promise<{ code: number | null; stderr: string; stdout: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [AGENT_JS, 'agent'], { env: s.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    let stdout = '';
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
      // A second agent that got ready is the failure under test: stop it and report.
      if (stdout.includes('"ready":true')) child.kill('SIGTERM');
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the second agent neither started nor ended; stderr: ${stderr}`));
    }, 60_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr, stdout });
    });
  });
}

test('an agent stopped beyond the old lease keeps the lock: a second agent exits 73, the first goes on after SIGCONT', async () => {
  const s = makeTestEnv(null);
  stations.push(s);
  const first = await startAgent(s);
  const pid = first.child.pid ?? 0;
  try {
    process.kill(pid, 'SIGSTOP');
    // The stall under test: longer than the old proper-lockfile lease (stale after 4 s).
    await new Promise((resolve) => setTimeout(resolve, 6000));
    const second = await secondAgent(s);
    assert.equal(second.stdout.includes('"ready":true'), false, 'the second agent never became ready');
    assert.equal(second.code, 73, second.stderr);
    assert.match(second.stderr, /another agent is running for this user/);
    process.kill(pid, 'SIGCONT');
    const status = await runCli(s, ['status', '--json']);
    assert.equal(status.code, 0, status.stderr);
    assert.equal((JSON.parse(status.stdout) as { agent: { pid: number } }).agent.pid, pid, 'the first agent still serves');
    assert.equal(first.child.exitCode, null, 'the first agent is alive');
  } finally {
    process.kill(pid, 'SIGCONT');
    const exited = new Promise((resolve) => first.child.once('exit', resolve));
    first.child.kill('SIGTERM');
    await exited;
  }
});

test("the lock is the kernel's flock: held while the agent lives, free the moment it is killed", async () => {
  const s = makeTestEnv(null);
  stations.push(s);
  const lockFile = path.join(s.home, '.quantilica', 'agent.flock');
  const first = await startAgent(s);
  // util-linux flock on the same file: what any other process would see.
  assert.notEqual(spawnSync('flock', ['--nonblock', lockFile, 'true']).status, 0, 'held while the agent runs');
  const exited = new Promise((resolve) => first.child.once('exit', resolve));
  first.child.kill('SIGKILL');
  await exited;
  assert.equal(spawnSync('flock', ['--nonblock', lockFile, 'true']).status, 0, 'free as soon as the agent is gone, no lease to wait out');
});
