import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { FIXTURES, groupExists, listRuns, makeTestEnv, runCli, startAgent } from '../support/harness';
import { waitFor } from '../support/waitFor';

test(
  'kill -9 of the agent: fetchers keep running and their slots; a new agent adopts them and records their exit codes',
  { timeout: 120000 },
  async (t) => {
    const station = makeTestEnv(
      [
        { name: 'until-file', pool: 'heavy-io', argv: [path.join(FIXTURES, 'exitWhenFileExists.sh')] },
        { name: 'quick', pool: 'heavy-io', argv: ['true'] },
      ],
      { CRON_POOL_HEAVY_IO_TIMEOUT: '1' },
    );
    const release = (i: number) => path.join(station.root, `release-${i}`);
    const codes = [0, 3, 4];
    const first = await startAgent(station);
    const runIds: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await runCli(station, ['run', 'until-file', '--detach', '--json', '--', release(i), String(codes[i])]);
      assert.equal(r.code, 0, r.stderr);
      runIds.push((JSON.parse(r.stdout) as RunInfo).runId);
    }
    const running = await waitFor(
      async () => {
        const all = await listRuns(station);
        return runIds.every((id) => all.find((r) => r.runId === id)?.status === 'running') ? all : null;
      },
      { what: 'three fetchers running', timeoutMs: 20000 },
    );
    const pids = runIds.map((id) => running.find((r) => r.runId === id)!.pid!);

    first.child.kill('SIGKILL');
    await new Promise((resolve) => first.child.once('exit', resolve));
    for (const pid of pids) assert.ok(groupExists(pid), 'a fetcher died with the agent');

    // With no agent, a CLI run works in-process on the same slots: the pool is full, so it must wait
    // and time out rather than take a slot from the orphaned fetchers.
    const intruder = await runCli(station, ['run', 'quick']);
    assert.equal(intruder.code, 75, intruder.stderr + intruder.stdout);
    assert.match(intruder.stdout, /failed \(wait-timeout\)/);

    // One fetcher ends while no agent watches: its status waits on disk for the next agent.
    fs.writeFileSync(release(0), '');
    await waitFor(() => !groupExists(pids[0]), { what: 'the first fetcher to end' });

    const second = await startAgent(station);
    try {
      const adopted = await listRuns(station);
      t.diagnostic(
        `after restart: ${adopted
          .filter((r) => runIds.includes(r.runId))
          .map((r) => `${r.runId} ${r.status} ${r.exitCode}`)
          .join(', ')}`,
      );
      const byId = (id: string) => adopted.find((r) => r.runId === id)!;
      assert.equal(byId(runIds[0]).status, 'completed');
      assert.equal(byId(runIds[0]).exitCode, 0);
      assert.equal(byId(runIds[1]).status, 'running');
      assert.equal(byId(runIds[2]).status, 'running');

      fs.writeFileSync(release(1), '');
      fs.writeFileSync(release(2), '');
      const ended = await waitFor(
        async () => {
          const all = await listRuns(station);
          const two = [all.find((r) => r.runId === runIds[1]), all.find((r) => r.runId === runIds[2])];
          return two.every((r) => r && r.status !== 'running') ? two : null;
        },
        { what: 'the adopted runs to end', timeoutMs: 20000 },
      );
      assert.deepEqual(
        ended.map((r) => [r!.status, r!.exitCode]),
        [
          ['failed', 3],
          ['failed', 4],
        ],
      );
    } finally {
      second.child.kill('SIGTERM');
      await new Promise((resolve) => second.child.once('exit', resolve));
    }
  },
);
