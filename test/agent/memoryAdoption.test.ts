import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { FIXTURES, OUT_FIXTURES, listRuns, makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';
import { memoryCgroup, removeCgroupTree, uniqueCgroupName } from '../support/cgroups';
import { waitFor } from '../support/waitFor';

// Memory ceilings: an agent killed with kill -9 leaves its runs in their cgroups. The next
// agent adopts the cgroups of runs still alive (figures, cancel through the cgroup) and removes
// those of runs that ended meanwhile, after reading their peak memory and CPU.
const NAME = uniqueCgroupName('adopt');
after(() => removeCgroupTree(NAME));

function procsOf(dir: string): number[] {
  try {
    return fs.readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

async function runOf(t: TestEnv, runId: string): Promise<RunInfo | undefined> {
  return (await listRuns(t)).find((x) => x.runId === runId);
}

test(
  'after kill -9 of the agent the next one adopts live runs with their cgroups and cleans those of ended runs',
  { timeout: 180000 },
  async () => {
    const dir = makeTestEnv(null).root;
    const holdA = path.join(dir, 'release-a');
    const endB = path.join(dir, 'end-b');
    const t = makeTestEnv(
      [
        {
          name: 'holder',
          pool: 'heavy-io',
          argv: [process.execPath, path.join(OUT_FIXTURES, 'allocateMemory.js'), '60'],
          env: { ALLOC_HOLD_FILE: holdA },
          memoryMb: 256,
        },
        { name: 'quick', pool: 'heavy-io', argv: [path.join(FIXTURES, 'exitWhenFileExists.sh'), endB, '0'] },
      ],
      { QUANTILICA_CGROUP_NAME: NAME },
    );
    const first = await startAgent(t);
    let second: Awaited<ReturnType<typeof startAgent>> | null = null;
    try {
      const a = JSON.parse((await runCli(t, ['run', 'holder', '--detach', '--json'])).stdout) as RunInfo;
      const b = JSON.parse((await runCli(t, ['run', 'quick', '--detach', '--json'])).stdout) as RunInfo;
      const cgA = memoryCgroup(NAME, 'heavy-io', a.runId);
      const cgB = memoryCgroup(NAME, 'heavy-io', b.runId);
      await waitFor(() => procsOf(cgA).length > 0 && procsOf(cgB).length > 0, { what: 'both runs inside their cgroups', timeoutMs: 30000 });

      first.child.kill('SIGKILL');
      await new Promise((resolve) => {
        if (first.child.exitCode !== null || first.child.signalCode !== null) resolve(null);
        else first.child.once('exit', resolve);
      });
      // Run B ends while no agent watches: its cgroup stays behind, empty.
      fs.writeFileSync(endB, '');
      await waitFor(() => procsOf(cgB).length === 0, { what: 'run B to end while the agent is down', timeoutMs: 30000 });
      assert.ok(fs.existsSync(cgB), "the ended run's cgroup was left behind");

      second = await startAgent(t);
      const endedB = await waitFor(
        async () => {
          const r = await runOf(t, b.runId);
          return r && r.status !== 'running' ? r : null;
        },
        { what: 'the next agent to finish run B', timeoutMs: 30000, intervalMs: 200 },
      );
      assert.equal(endedB.status, 'completed');
      assert.equal(endedB.memorySource, 'cgroup', 'its figures came from the cgroup it left');
      assert.ok(endedB.peakMemoryMb !== null && endedB.peakMemoryMb! > 0);
      await waitFor(() => !fs.existsSync(cgB), { what: "the ended run's cgroup to be removed", timeoutMs: 10000 });

      const liveA = await waitFor(
        async () => {
          const r = await runOf(t, a.runId);
          return r && r.status === 'running' && (r.memoryMb ?? 0) >= 60 ? r : null;
        },
        { what: "run A adopted with its cgroup's memory", timeoutMs: 30000, intervalMs: 200 },
      );
      assert.equal(liveA.memorySource, 'cgroup');
      assert.equal(liveA.memoryLimitMb, 256, "the run's own ceiling, read back from its cgroup");
      assert.ok(procsOf(cgA).length > 0, 'run A still lives in its cgroup');

      const cancel = await runCli(t, ['cancel', a.runId]);
      assert.equal(cancel.code, 0, cancel.stderr);
      const endedA = await runOf(t, a.runId);
      assert.equal(endedA?.status, 'cancelled');
      assert.ok(endedA?.peakMemoryMb !== null && endedA.peakMemoryMb! >= 60, `peak ${endedA?.peakMemoryMb} MB`);
      assert.deepEqual(procsOf(cgA), []);
      await waitFor(() => !fs.existsSync(cgA), { what: "the cancelled run's cgroup to be removed", timeoutMs: 10000 });
    } finally {
      fs.writeFileSync(holdA, '');
      fs.writeFileSync(endB, '');
      if (first.child.exitCode === null && first.child.signalCode === null) first.child.kill('SIGKILL');
      if (second) {
        second.child.kill('SIGTERM');
        const child = second.child;
        await new Promise((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) resolve(null);
          else child.once('exit', resolve);
        });
      }
    }
  },
);
