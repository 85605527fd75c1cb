import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { FIXTURES, groupExists, listRuns, makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';
import { waitFor } from '../support/waitFor';

const catalog = [{ name: 'until-file', pool: 'heavy-io' as const, argv: [path.join(FIXTURES, 'exitWhenFileExists.sh')] }];

async function startRun(station: TestEnv): Promise<RunInfo> {
  const r = await runCli(station, ['run', 'until-file', '--detach', '--json', '--', path.join(station.root, 'never'), '0']);
  assert.equal(r.code, 0, r.stderr);
  const { runId } = JSON.parse(r.stdout) as RunInfo;
  return waitFor(
    async () => {
      const runs = await listRuns(station);
      const run = runs.find((x) => x.runId === runId);
      return run?.status === 'running' ? run : null;
    },
    { what: 'the run to start', timeoutMs: 20000 },
  );
}

function exited(child: { once(event: 'exit', cb: (code: number | null) => void): unknown }): Promise<number | null> {
  return new Promise((resolve) => child.once('exit', resolve));
}

test('one agent per user: a second agent is refused with a clear message', async () => {
  const station = makeTestEnv(catalog);
  const agent = await startAgent(station);
  try {
    const second = await runCli(station, ['agent'], 60000);
    assert.equal(second.code, 73);
    assert.match(second.stderr, /another agent is running for this user/);
  } finally {
    agent.child.kill('SIGTERM');
    await exited(agent.child);
  }
});

test('SIGTERM stops the agent and leaves running fetchers alone; --stop-fetchers-on-exit cancels them', { timeout: 120000 }, async () => {
  const station = makeTestEnv(catalog);
  const first = await startAgent(station);
  const run = await startRun(station);
  first.child.kill('SIGTERM');
  assert.equal(await exited(first.child), 0);
  assert.ok(groupExists(run.pid!), 'the fetcher outlives a stopping agent');

  const second = await startAgent(station, ['--stop-fetchers-on-exit']);
  second.child.kill('SIGTERM');
  assert.equal(await exited(second.child), 0);
  assert.equal(groupExists(run.pid!), false, 'the adopted fetcher was stopped with the agent');
  const runs = await listRuns(station);
  assert.equal(runs.find((r) => r.runId === run.runId)?.status, 'cancelled');
});

test('an adopted run can be cancelled through the new agent', { timeout: 120000 }, async () => {
  const station = makeTestEnv(catalog);
  const first = await startAgent(station);
  const run = await startRun(station);
  first.child.kill('SIGKILL');
  await exited(first.child);
  const second = await startAgent(station);
  try {
    const r = await runCli(station, ['cancel', run.runId]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`run ${run.runId} until-file cancelled`));
    assert.equal(groupExists(run.pid!), false);
  } finally {
    second.child.kill('SIGTERM');
    await exited(second.child);
  }
});
