import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { FIXTURES, groupExists, listRuns, makeTestEnv, runCli, startAgent } from '../support/harness';
import { waitFor } from '../support/waitFor';

test(
  'a run cancelled before the agent stops and ending after it is recorded cancelled by the next agent',
  { timeout: 120000 },
  async () => {
    // A long grace: the run's end is its own cleanup, not a SIGKILL.
    const station = makeTestEnv([{ name: 'tidy', pool: 'network-light', argv: [path.join(FIXTURES, 'cleanupUntilFile.sh')] }], {
      QUANTILICA_CANCEL_GRACE_SECONDS: '120',
    });
    const release = path.join(station.root, 'release');
    const first = await startAgent(station);
    let second: Awaited<ReturnType<typeof startAgent>> | null = null;
    let pid = 0;
    try {
      const started = await runCli(station, ['run', 'tidy', '--detach', '--json', '--', release]);
      assert.equal(started.code, 0, started.stderr);
      const { runId } = JSON.parse(started.stdout) as RunInfo;
      const running = await waitFor(async () => (await listRuns(station)).find((r) => r.runId === runId && r.status === 'running'), {
        what: 'the run to run',
        timeoutMs: 20000,
      });
      pid = running.pid!;

      const cancel = await runCli(station, ['cancel', '--run', runId, '--no-wait']);
      assert.equal(cancel.code, 0, cancel.stderr);
      await waitFor(() => fs.existsSync(`${release}.term`), { what: 'the fetcher to get its SIGTERM', timeoutMs: 20000 });

      first.child.kill('SIGTERM');
      await new Promise((resolve) => first.child.once('exit', resolve));
      assert.ok(groupExists(pid), 'the fetcher, in its cleanup, outlived the agent');

      second = await startAgent(station);
      fs.writeFileSync(release, '');
      const ended = await waitFor(async () => (await listRuns(station)).find((r) => r.runId === runId && r.status !== 'running'), {
        what: 'the adopted run to end',
        timeoutMs: 20000,
      });
      assert.deepEqual([ended.status, ended.reason, ended.exitCode], ['cancelled', 'cancelled', 143]);
    } finally {
      fs.writeFileSync(release, '');
      if (pid > 0) await waitFor(() => !groupExists(pid), { what: 'the fetcher to end', timeoutMs: 20000 });
      for (const agent of [first, second]) {
        if (agent === null || agent.child.exitCode !== null || agent.child.signalCode !== null) continue;
        agent.child.kill('SIGTERM');
        await new Promise((resolve) => agent.child.once('exit', resolve));
      }
    }
  },
);
