import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { connectAgent } from '../../agent/client/agentClient';
import type { RunInfo } from '../../shared/protocol';
import { groupMembers, listRuns, makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';
import { waitFor } from '../support/waitFor';

// A run started by the CLI with no agent (`run --detach`, or a cron `run` waiting on it) is owned by
// that CLI process; an agent started later reaches it: cancel by id and by fetcher name works, and
// cancel, `runs`, the agent's clients and its pool counts agree. An owner that cannot act (stopped)
// is named and the cancel refused with exit 69.

const stations: TestEnv[] = [];
const pids: number[] = [];
after(() => {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGCONT');
      process.kill(pid, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

function station(): TestEnv {
  const s = makeTestEnv([{ name: 'sl', pool: 'heavy-io', argv: ['/bin/sleep'] }], { CRON_POOL_HEAVY_IO_SLOTS: '1' });
  stations.push(s);
  return s;
}

/** `run sl --detach -- 60` with no agent, once its fetcher runs. */
async function detachedRun(t: TestEnv): Promise<RunInfo> {
  const r = await runCli(t, ['run', 'sl', '--detach', '--json', '--', '60']);
  assert.equal(r.code, 0, r.stderr);
  const { runId } = JSON.parse(r.stdout) as RunInfo;
  const running = await waitFor(async () => (await listRuns(t)).find((x) => x.runId === runId && x.status === 'running' && x.pid), {
    what: 'the detached run to start',
    timeoutMs: 30000,
    intervalMs: 100,
  });
  pids.push(running.pid!);
  return running;
}

/** The detached owner process (`quantilica run-owner`) of this station. */
function ownerPid(t: TestEnv, runId: string): number {
  for (const entry of fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const argv = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      const env = fs.readFileSync(`/proc/${entry}/environ`, 'utf8');
      if (argv[2] === 'run-owner' && env.includes(`HOME=${t.home}\0`)) return Number(entry);
    } catch {
      // Gone meanwhile.
    }
  }
  throw new Error(`no run-owner process for ${runId}`);
}

test(
  'with an agent started after a detached CLI run: cancel <id> and cancel <fetcher> end it, and runs, events and pools agree',
  { timeout: 150000 },
  async () => {
    const t = station();
    const first = await detachedRun(t);
    const owner = ownerPid(t, first.runId);
    pids.push(owner);
    const agent = await startAgent(t);
    const client = await connectAgent(path.join(t.home, '.quantilica', 'agent.json'), { client: 'tree' });
    try {
      assert.equal((await listRuns(t)).find((r) => r.runId === first.runId)?.status, 'running', "the agent lists the CLI's run");
      const heavy = () => client.snapshot.pools.find((p) => p.name === 'heavy-io')!;
      assert.equal((await client.getSnapshot()).pools.find((p) => p.name === 'heavy-io')?.used, 1);
      const ended: RunInfo[] = [];
      client.onChanged((e) => {
        if (e.kind === 'change' && e.params.change.kind === 'run' && e.params.change.run.status === 'cancelled')
          ended.push(e.params.change.run);
      });

      // By id, waiting for the end (the default).
      const byId = await runCli(t, ['cancel', first.runId], 60000);
      assert.equal(byId.code, 0, byId.stderr);
      assert.match(byId.stdout, new RegExp(`^run ${first.runId} sl cancelled$`, 'm'));
      assert.equal((await listRuns(t)).find((r) => r.runId === first.runId)?.status, 'cancelled');
      assert.equal(groupMembers(first.pid!).length, 0, "nothing of the run's group is left");
      await waitFor(() => ended.some((r) => r.runId === first.runId), { what: "the agent's clients to learn the end", timeoutMs: 10000 });
      await waitFor(() => heavy().used === 0 && heavy().slots.every((s) => s.holder === null), {
        what: "the tree's heavy-io pool to show the slot free",
        timeoutMs: 10000,
      });
      await waitFor(
        () => {
          try {
            process.kill(owner, 0);
            return false;
          } catch {
            return true;
          }
        },
        { what: 'the owner process to end', timeoutMs: 10000 },
      );

      const exited = new Promise((resolve) => agent.child.once('exit', resolve));
      agent.child.kill('SIGTERM');
      await exited;
    } finally {
      await client.close().catch(() => undefined);
      if (agent.child.exitCode === null && agent.child.signalCode === null) agent.child.kill('SIGKILL');
    }
    // By fetcher name, without waiting: said at once, and it ends.
    const second = await detachedRun(t);
    const agent2 = await startAgent(t);
    try {
      const byName = await runCli(t, ['cancel', 'sl', '--no-wait'], 30000);
      assert.equal(byName.code, 0, byName.stderr);
      assert.doesNotMatch(byName.stdout, /nothing to cancel/);
      assert.match(byName.stdout, new RegExp(`^run ${second.runId} sl `, 'm'));
      await waitFor(async () => (await listRuns(t)).find((r) => r.runId === second.runId)?.status === 'cancelled', {
        what: 'the run cancelled by name to end',
        timeoutMs: 30000,
        intervalMs: 100,
      });
      const status = JSON.parse((await runCli(t, ['status', '--json'])).stdout) as { pools: { name: string; used: number }[] };
      assert.equal(status.pools.find((p) => p.name === 'heavy-io')?.used, 0);
    } finally {
      agent2.child.kill('SIGTERM');
      await new Promise((resolve) => agent2.child.once('exit', resolve));
    }
  },
);

test('an owner that cannot act (stopped) is named and the cancel refused with exit 69; nothing changes', { timeout: 120000 }, async () => {
  const t = station();
  const run = await detachedRun(t);
  const owner = ownerPid(t, run.runId);
  pids.push(owner);
  const agent = await startAgent(t);
  process.kill(owner, 'SIGSTOP');
  try {
    const refused = await runCli(t, ['cancel', run.runId], 30000);
    assert.equal(refused.code, 69, `${refused.stdout}\n${refused.stderr}`);
    assert.match(
      refused.stderr,
      new RegExp(`^quantilica: run ${run.runId} is managed by the quantilica process ${owner}, which is stopped`, 'm'),
    );
    assert.equal((await listRuns(t)).find((r) => r.runId === run.runId)?.status, 'running', 'nothing changed');
    assert.ok(groupMembers(run.pid!).length > 0);
  } finally {
    process.kill(owner, 'SIGCONT');
  }
  // Resumed, the same cancel works.
  const again = await runCli(t, ['cancel', run.runId], 60000);
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stdout, new RegExp(`^run ${run.runId} sl cancelled$`, 'm'));
  agent.child.kill('SIGTERM');
  await new Promise((resolve) => agent.child.once('exit', resolve));
});
