import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo, Snapshot } from '../../shared/protocol';
import { AGENT_JS, OUT_FIXTURES, makeTestEnv, readyAgent, type TestEnv } from '../support/harness';
import { uniqueCgroupName } from '../support/cgroups';
import { waitFor } from '../support/waitFor';

// Memory ceilings without cgroup access: the agent runs as a throwaway unprivileged user
// (unique per run of this file), who may not write the memory controller. Runs still work, their
// memory is sampled from /proc, and status, log and pool states say ceilings are not enforced.
const USER = `qmemu${process.pid}`;
let uid = 0;
let gid = 0;

before(() => {
  execFileSync('useradd', ['-M', '-N', '-s', '/bin/sh', USER]);
  uid = Number(execFileSync('id', ['-u', USER], { encoding: 'utf8' }));
  gid = Number(execFileSync('id', ['-g', USER], { encoding: 'utf8' }));
});

after(() => {
  spawnSync('userdel', [USER]);
});

function asUser(args: string[]): string[] {
  return ['--reuid', String(uid), '--regid', String(gid), '--clear-groups', ...args];
}

function cliAsUser(t: TestEnv, args: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync('setpriv', asUser([process.execPath, AGENT_JS, ...args]), { env: t.env, encoding: 'utf8', cwd: '/', timeout: 60000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

function startAgentAsUser(t: TestEnv): Promise<{ child: ChildProcess; stderr: () => string }> {
  return readyAgent(
    spawn('setpriv', asUser([process.execPath, AGENT_JS, 'agent']), { env: t.env, cwd: '/', stdio: ['ignore', 'pipe', 'pipe'] }),
  );
}

test(
  'without cgroup access runs still work, memory is sampled, and status says ceilings are not enforced',
  { timeout: 120000 },
  async () => {
    const dir = makeTestEnv(null).root;
    // The fetcher (the unprivileged user) must be able to see the release file appear.
    fs.chmodSync(dir, 0o755);
    const hold = path.join(dir, 'release');
    const t = makeTestEnv(
      [
        {
          name: 'alloc',
          pool: 'network-light',
          argv: [process.execPath, path.join(OUT_FIXTURES, 'allocateMemory.js'), '120'],
          env: { ALLOC_HOLD_FILE: hold },
        },
      ],
      {
        QUANTILICA_CGROUP_NAME: uniqueCgroupName('unpriv'),
        QUANTILICA_HEARTBEAT_SECONDS: '0.2',
      },
    );
    execFileSync('chown', ['-R', `${uid}:${gid}`, t.root]);
    const agent = await startAgentAsUser(t);
    try {
      const status = cliAsUser(t, ['status', '--json']);
      assert.equal(status.status, 0, status.stderr);
      const snapshot = JSON.parse(status.stdout) as Snapshot;
      assert.equal(snapshot.agent.memory?.kind, 'not-enforced');
      assert.match(snapshot.agent.memory?.reason ?? '', /^cgroup-v\d-/, 'the reason is a token naming what was missing');
      assert.ok(
        snapshot.pools.every((p) => p.memory?.enforcement === 'not-enforced'),
        'every pool says its ceiling is not enforced',
      );
      const human = cliAsUser(t, ['status']);
      assert.match(human.stdout, /memory: ceilings NOT ENFORCED \(cgroup-v\d-[a-z-]+\)/);
      assert.match(agent.stderr(), /MEMORY CEILINGS ARE NOT ENFORCED/, 'the log says so at start');

      const started = cliAsUser(t, ['run', 'alloc', '--detach', '--json']);
      assert.equal(started.status, 0, started.stderr);
      const runId = (JSON.parse(started.stdout) as RunInfo).runId;
      const runOf = (): RunInfo | undefined => {
        const r = cliAsUser(t, ['runs', '--json']);
        return (JSON.parse(r.stdout) as { runs: RunInfo[] }).runs.find((x) => x.runId === runId);
      };
      // The run holds its 120 MB until the test releases it: the samples must see it.
      const live = await waitFor(
        () => {
          const r = runOf();
          return r && r.status === 'running' && (r.memoryMb ?? 0) >= 120 ? r : null;
        },
        { what: "the run's sampled memory to show its 120 MB", timeoutMs: 60000, intervalMs: 200 },
      );
      assert.equal(live.memorySource, 'sampled');
      fs.writeFileSync(hold, '');
      const ended = await waitFor(
        () => {
          const r = runOf();
          return r && r.status !== 'running' && r.status !== 'waiting' ? r : null;
        },
        { what: 'the run to end', timeoutMs: 60000, intervalMs: 200 },
      );
      assert.equal(ended.status, 'completed');
      assert.equal(ended.memorySource, 'sampled');
      assert.ok(ended.peakMemoryMb! >= 120, `sampled peak ${ended.peakMemoryMb} MB`);
      assert.ok(ended.cpuSeconds !== null && ended.cpuSeconds! >= 0);
      const runs = cliAsUser(t, ['runs']);
      assert.match(runs.stdout, /~peak \d+/, '`runs` shows the sampled peak, marked');
    } finally {
      fs.writeFileSync(hold, '');
      agent.child.kill('SIGTERM');
      await new Promise((resolve) => {
        if (agent.child.exitCode !== null) resolve(null);
        else agent.child.once('exit', resolve);
      });
    }
  },
);
