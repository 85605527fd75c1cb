import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { FIXTURES, groupExists, groupMembers, listRuns, makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';
import { waitFor } from '../support/waitFor';

type Agent = Awaited<ReturnType<typeof startAgent>>;

/**
 * Runs `fetcher` under a first agent, cancels it, waits for `cancelled` (the SIGTERM arrived), stops
 * that agent by SIGTERM with the run still in its group, starts a second agent and hands it to `then`.
 * Both agents are stopped and the run's group is gone at the end, whatever happened.
 */
async function cancelThenRestart(
  station: TestEnv,
  fetcher: string,
  args: string[],
  cancelled: () => boolean,
  then: (runId: string, pid: number) => Promise<void>,
  cleanUp: () => void = () => {},
): Promise<void> {
  const agents: Agent[] = [await startAgent(station)];
  let pid = 0;
  try {
    const started = await runCli(station, ['run', fetcher, '--detach', '--json', '--', ...args]);
    assert.equal(started.code, 0, started.stderr);
    const { runId } = JSON.parse(started.stdout) as RunInfo;
    const running = await waitFor(async () => (await listRuns(station)).find((r) => r.runId === runId && r.status === 'running'), {
      what: 'the run to run',
      timeoutMs: 20000,
    });
    pid = running.pid!;
    const cancel = await runCli(station, ['cancel', '--run', runId, '--no-wait']);
    assert.equal(cancel.code, 0, cancel.stderr);
    await waitFor(cancelled, { what: 'the fetcher to get its SIGTERM', timeoutMs: 20000 });
    agents[0].child.kill('SIGTERM');
    await new Promise((resolve) => agents[0].child.once('exit', resolve));
    assert.ok(groupExists(pid), 'the fetcher outlived the agent that cancelled it');
    agents.push(await startAgent(station));
    await then(runId, pid);
  } finally {
    cleanUp();
    if (pid > 0) {
      if (groupExists(pid)) process.kill(-pid, 'SIGKILL');
      await waitFor(() => !groupExists(pid), { what: 'the fetcher to end', timeoutMs: 20000 });
    }
    for (const agent of agents) {
      if (agent.child.exitCode !== null || agent.child.signalCode !== null) continue;
      agent.child.kill('SIGTERM');
      await new Promise((resolve) => agent.child.once('exit', resolve));
    }
  }
}

function endOf(station: TestEnv, runId: string, timeoutMs = 20000): Promise<RunInfo> {
  return waitFor(async () => (await listRuns(station)).find((r) => r.runId === runId && r.status !== 'running'), {
    what: 'the adopted run to end',
    timeoutMs,
  });
}

test(
  'a run cancelled before the agent stops and ending after it is recorded cancelled by the next agent',
  { timeout: 120000 },
  async () => {
    // A long grace: the run's end is its own cleanup, not a SIGKILL.
    const station = makeTestEnv([{ name: 'tidy', pool: 'network-light', argv: [path.join(FIXTURES, 'cleanupUntilFile.sh')] }], {
      QUANTILICA_CANCEL_GRACE_SECONDS: '120',
    });
    const release = path.join(station.root, 'release');
    await cancelThenRestart(
      station,
      'tidy',
      [release],
      () => fs.existsSync(`${release}.term`),
      async (runId) => {
        fs.writeFileSync(release, '');
        const ended = await endOf(station, runId);
        assert.deepEqual([ended.status, ended.reason, ended.exitCode], ['cancelled', 'cancelled', 143]);
      },
      () => fs.writeFileSync(release, ''),
    );
  },
);

test('a cancelled run that ignores SIGTERM is killed after the grace by the agent that adopts it', { timeout: 120000 }, async () => {
  // The first agent stops well within the grace: its SIGKILL timer never fires.
  const graceSeconds = 4;
  const station = makeTestEnv([{ name: 'stubborn', pool: 'network-light', argv: [path.join(FIXTURES, 'stubbornGroup.sh')] }], {
    QUANTILICA_CANCEL_GRACE_SECONDS: String(graceSeconds),
  });
  await cancelThenRestart(
    station,
    'stubborn',
    [],
    // The agent's cancel sends the SIGTERM before it answers; the group ignores it.
    () => true,
    async (runId, pid) => {
      // Only a SIGKILL ends the group: the adopting agent's, after its grace.
      const ended = await endOf(station, runId, (graceSeconds + 20) * 1000);
      assert.deepEqual([ended.status, ended.reason], ['cancelled', 'cancelled']);
      assert.deepEqual(groupMembers(pid), [], "no process of the run's group is left");
    },
  );
});
