// The queue outlives an agent stop: runs waiting when the agent gets SIGTERM or is killed (-9) stay
// waiting, and the next agent runs each of them once, in their order, with their enqueue time and
// trigger; a `quantilica run` waiting on one follows it to its end through the next agent.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { memoryLogger } from '../support/memoryLogger';
import { Spool } from '../../agent/telemetry/spool';
import { listRuns, makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';
import { waitFor } from '../support/waitFor';
import { UNTIL_GO } from '../support/untilGo';

// Each queued run leaves its id in the order file: the file says which ran, how often, in what order.
const noteRun = ['sh', '-c', 'echo "$QUANTILICA_RUN_ID" >> "$DATA_DIR/order"'];
const stations: TestEnv[] = [];
after(() => {
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

function station(extra: Record<string, string> = {}): TestEnv {
  const t = makeTestEnv(
    [
      { name: 'holder', pool: 'cpu-analysis', argv: UNTIL_GO },
      { name: 'queued', pool: 'cpu-analysis', argv: noteRun },
    ],
    { CRON_POOL_CPU_ANALYSIS_SLOTS: '1', ...extra },
  );
  fs.mkdirSync(t.dataDir, { recursive: true });
  stations.push(t);
  return t;
}

/** `quantilica runs --json --limit 100`: the station's newest 100 runs. */
const runs = (t: TestEnv): Promise<RunInfo[]> => listRuns(t, ['--limit', '100']);

async function detach(t: TestEnv, fetcher: string): Promise<string> {
  const r = await runCli(t, ['run', fetcher, '--detach', '--json']);
  assert.equal(r.code, 0, r.stderr);
  return (JSON.parse(r.stdout) as RunInfo).runId;
}

function exited(child: import('node:child_process').ChildProcess): Promise<number | null> {
  return child.exitCode !== null ? Promise.resolve(child.exitCode) : new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

function finishes(t: TestEnv): Map<string, Array<{ status: string; reason: string | null }>> {
  const spool = new Spool({
    path: path.join(t.home, '.quantilica', 'telemetry_spool.db'),
    logger: memoryLogger(),
    fallbackPath: path.join(t.root, 'fallback.db'),
  });
  try {
    const byRun = new Map<string, Array<{ status: string; reason: string | null }>>();
    for (const e of spool.readBatch(100000).filter((row) => row.event === 'finish')) {
      byRun.set(e.runId, [...(byRun.get(e.runId) ?? []), JSON.parse(e.payload) as { status: string; reason: string | null }]);
    }
    return byRun;
  } finally {
    spool.close();
  }
}

for (const stop of ['SIGTERM', 'SIGKILL'] as const) {
  test(
    `waiting runs outlive an agent stop by ${stop}: the next agent runs each once, in order, with its enqueue time and trigger`,
    { timeout: 180000 },
    async () => {
      const t = station();
      let agent = await startAgent(t);
      let follower: Promise<import('../support/harness').CliResult> | null = null;
      try {
        const holder = await detach(t, 'holder');
        await waitFor(async () => (await runs(t)).find((r) => r.runId === holder)?.status === 'running', {
          what: 'the holder to take the only slot',
          timeoutMs: 30000,
        });
        const queued: string[] = [];
        for (let i = 0; i < 3; i++) queued.push(await detach(t, 'queued'));
        // A foreground `quantilica run` waits on the fourth: it must follow the run through the next agent.
        if (stop === 'SIGTERM') follower = runCli(t, ['run', 'queued', '--json'], 150000);
        const before = await waitFor(
          async () => {
            const all = (await runs(t)).filter((r) => r.fetcher === 'queued');
            return all.length === queued.length + (follower ? 1 : 0) && all.every((r) => r.status === 'waiting' && r.wait?.kind === 'pool')
              ? all
              : null;
          },
          { what: 'every queued run waiting for the slot', timeoutMs: 30000 },
        );
        const order = [...before].sort((a, b) => a.enqueuedAt.localeCompare(b.enqueuedAt)).map((r) => r.runId);
        assert.deepEqual(order.slice(0, 3), queued, 'the detached runs were queued in the order they were asked for');

        agent.child.kill(stop);
        const code = await exited(agent.child);
        if (stop === 'SIGTERM') assert.equal(code, 0);

        // No agent now: the queue is as the stopped agent left it, nothing cancelled.
        const kept = (await runs(t)).filter((r) => r.fetcher === 'queued');
        for (const r of before) {
          const now = kept.find((k) => k.runId === r.runId);
          assert.equal(now?.status, 'waiting', `run ${r.runId} still waits after the stop (${now?.status} ${now?.reason ?? ''})`);
        }
        assert.equal(fs.existsSync(path.join(t.dataDir, 'order')), false, 'no queued run ran while no agent ran');

        agent = await startAgent(t);
        fs.writeFileSync(path.join(t.dataDir, 'go'), '');
        const done = await waitFor(
          async () => {
            const all = (await runs(t)).filter((r) => order.includes(r.runId) || r.runId === holder);
            return all.length === order.length + 1 && all.every((r) => r.status === 'completed') ? all : null;
          },
          { what: 'the holder and every queued run to complete under the next agent', timeoutMs: 60000 },
        );
        const ran = fs.readFileSync(path.join(t.dataDir, 'order'), 'utf8').trim().split('\n');
        assert.deepEqual(ran, order, 'each queued run ran exactly once, in the order it was queued');
        for (const r of before) {
          const end = done.find((d) => d.runId === r.runId)!;
          assert.equal(end.enqueuedAt, r.enqueuedAt, 'the enqueue time is kept');
          assert.equal(end.trigger, r.trigger, 'the trigger is kept');
        }
        if (follower) {
          const followed = await follower;
          assert.equal(followed.code, 0, `the waiting CLI followed its run to its end: ${followed.stderr}`);
          assert.ok(order.includes((JSON.parse(followed.stdout) as RunInfo).runId));
        }
        agent.child.kill('SIGTERM');
        assert.equal(await exited(agent.child), 0);

        const ends = finishes(t);
        for (const id of [...order, holder]) {
          assert.deepEqual(
            ends.get(id)?.map((f) => f.status),
            ['completed'],
            `one finish event, completed, for ${id}`,
          );
        }
      } finally {
        if (agent.child.exitCode === null) agent.child.kill('SIGKILL');
        fs.writeFileSync(path.join(t.dataDir, 'go'), '');
        await follower?.catch(() => undefined);
      }
    },
  );
}

test(
  'without an agent, `quantilica cancel` ends a run the stopped agent left queued; the next agent never starts it',
  { timeout: 120000 },
  async () => {
    const t = station();
    let agent = await startAgent(t);
    try {
      const holder = await detach(t, 'holder');
      await waitFor(async () => (await runs(t)).find((r) => r.runId === holder)?.status === 'running', {
        what: 'the holder to take the only slot',
        timeoutMs: 30000,
      });
      const [gone, kept] = [await detach(t, 'queued'), await detach(t, 'queued')];
      await waitFor(
        async () => (await runs(t)).filter((r) => (r.runId === gone || r.runId === kept) && r.wait?.kind === 'pool').length === 2,
        { what: 'both runs queued', timeoutMs: 30000 },
      );
      agent.child.kill('SIGTERM');
      assert.equal(await exited(agent.child), 0);
      const cancelled = await runCli(t, ['cancel', gone]);
      assert.equal(cancelled.code, 0, cancelled.stderr);
      const end = (await runs(t)).find((r) => r.runId === gone)!;
      assert.deepEqual([end.status, end.reason, end.startedAt], ['cancelled', 'cancelled', null]);
      agent = await startAgent(t);
      fs.writeFileSync(path.join(t.dataDir, 'go'), '');
      await waitFor(async () => (await runs(t)).find((r) => r.runId === kept)?.status === 'completed', {
        what: 'the other queued run to complete',
        timeoutMs: 30000,
      });
      assert.deepEqual(fs.readFileSync(path.join(t.dataDir, 'order'), 'utf8').trim().split('\n'), [kept], 'the cancelled run never ran');
    } finally {
      fs.writeFileSync(path.join(t.dataDir, 'go'), '');
      if (agent.child.exitCode === null) {
        agent.child.kill('SIGTERM');
        await exited(agent.child);
      }
    }
  },
);

test(
  'a run whose wait limit passed while no agent ran ends wait-timeout when the next agent starts; the others are not touched',
  { timeout: 120000 },
  async () => {
    // A 15 s wait limit: long enough for a loaded machine's CLI polls to see the run wait under the first agent.
    const t = station({ CRON_POOL_CPU_ANALYSIS_TIMEOUT: '15' });
    let agent = await startAgent(t);
    try {
      const holder = await detach(t, 'holder');
      await waitFor(async () => (await runs(t)).find((r) => r.runId === holder)?.status === 'running', {
        what: 'the holder to take the only slot',
        timeoutMs: 30000,
      });
      const late = await detach(t, 'queued');
      const waiting = await waitFor(async () => (await runs(t)).find((r) => r.runId === late && r.wait?.kind === 'pool'), {
        what: 'the run to wait for the slot',
        timeoutMs: 30000,
      });
      agent.child.kill('SIGTERM');
      assert.equal(await exited(agent.child), 0);
      // The condition under test is time passing with no agent: its wait limit (15 s) from when it began waiting.
      await waitFor(() => Date.now() > Date.parse(waiting.enqueuedAt) + 16000, {
        what: 'the wait limit to pass',
        timeoutMs: 30000,
        intervalMs: 100,
      });
      agent = await startAgent(t);
      const end = await waitFor(
        async () => {
          const r = (await runs(t)).find((x) => x.runId === late);
          return r && r.status !== 'waiting' ? r : null;
        },
        { what: 'the next agent to end the run', timeoutMs: 30000 },
      );
      assert.deepEqual([end.status, end.reason], ['failed', 'wait-timeout']);
      assert.equal((await runs(t)).find((r) => r.runId === holder)?.status, 'running', 'the running holder goes on');
      assert.equal(fs.existsSync(path.join(t.dataDir, 'order')), false, 'the timed-out run never ran');
    } finally {
      fs.writeFileSync(path.join(t.dataDir, 'go'), '');
      if (agent.child.exitCode === null) {
        agent.child.kill('SIGTERM');
        await exited(agent.child);
      }
    }
  },
);
