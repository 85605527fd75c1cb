import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { connectAgent } from '../../agent/client/agentClient';
import { AGENT_JS, FIXTURES, makeTestEnv, openOrchestrator, OUT_FIXTURES, startAgent, testConfig, type TestEnv } from '../support/harness';
import { maxConcurrent } from '../support/maxConcurrent';
import { waitFor } from '../support/waitFor';
import { execProcess } from '../support/execProcess';

const PER_PROCESS = 50;

function holdCatalog(logFile: string) {
  return [{ name: 'hold', pool: 'heavy-io' as const, argv: [process.execPath, path.join(OUT_FIXTURES, 'holdSlot.js'), logFile] }];
}

// 300 CLI and agent runs of a node fixture: minutes on a loaded 2-core machine; the bound guards a hang, not speed.
test(
  'six processes (3 agents and 3 loops of CLI runs) x 50 acquisitions never put more than 3 holders in a 3-slot pool',
  { timeout: 600000 },
  async (t) => {
    const shared = makeTestEnv(null);
    const logFile = path.join(shared.root, 'holders.log');
    // Each process is its own station user (own HOME and state) sharing only the lock dir, as several
    // agents and cron-driven CLI runs would.
    const stations: TestEnv[] = Array.from({ length: 6 }, () => makeTestEnv(holdCatalog(logFile), {}, { lockDir: shared.lockDir }));
    // Holds of 100–200 ms: long against the fixture's own start-up, so the pool really fills up.
    const hold = () => String(100 + Math.floor(Math.random() * 100));
    // Three real agents, each given 50 runs at once over its protocol…
    const agents = await Promise.all(stations.slice(0, 3).map((s) => startAgent(s)));
    const agentRuns = agents.map(async (_agent, i) => {
      const client = await connectAgent(testConfig(stations[i]).connectionFile, { client: 'slot-stress' });
      try {
        const runs = await Promise.all(Array.from({ length: PER_PROCESS }, () => client.run('hold', [hold()])));
        return await Promise.all(runs.map((r) => client.waitRun(r.runId)));
      } finally {
        await client.close();
      }
    });
    // …and three cron-style loops of CLI runs with no agent, in-process on the same slot files.
    const cliLoops = stations
      .slice(3)
      .map((s) =>
        execProcess(
          'bash',
          [
            '-c',
            `for i in $(seq ${PER_PROCESS}); do "${process.execPath}" "${AGENT_JS}" run hold -- $((100 + RANDOM % 100)) >/dev/null || exit 1; done`,
          ],
          s.env,
        ),
      );
    try {
      for (const runs of await Promise.all(agentRuns))
        assert.deepEqual(
          new Set(runs.map((r) => r.status)),
          new Set(['completed']),
          JSON.stringify(runs.filter((r) => r.status !== 'completed').map((r) => [r.status, r.reason])),
        );
      for (const r of await Promise.all(cliLoops)) assert.equal(r.code, 0, r.stderr);
    } finally {
      for (const agent of agents) agent.child.kill('SIGTERM');
    }

    const { max, starts, stops } = maxConcurrent(logFile);
    t.diagnostic(`${starts} runs; at most ${max} holders at once`);
    assert.equal(starts, 6 * PER_PROCESS);
    assert.equal(stops, 6 * PER_PROCESS);
    assert.ok(max <= 3, `saw ${max} holders in a 3-slot pool`);
    assert.equal(max, 3, 'the stress never filled the pool, so it proved nothing');
  },
);

test("slots held by util-linux flock count as taken, and flock waits for the agent's slots", { timeout: 60000 }, async () => {
  const station = makeTestEnv([{ name: 'until-file', pool: 'heavy-io', argv: [path.join(FIXTURES, 'exitWhenFileExists.sh')] }]);
  const poolDir = path.join(station.lockDir, 'heavy-io');
  fs.mkdirSync(poolDir, { recursive: true, mode: 0o700 });
  const { orchestrator, runManager, close } = openOrchestrator(station);
  try {
    // A legacy script takes all three slots: each `flock` holds its file while `cat` waits on stdin.
    // The script runs with umask 077, as the runbook asks: its lock files are private like ours.
    const holders = [0, 1, 2].map((i) =>
      spawn('sh', ['-c', 'umask 077; exec flock -n "$0" cat', path.join(poolDir, `slot_${i}.lock`)], {
        stdio: ['pipe', 'ignore', 'inherit'],
      }),
    );
    await waitFor(() => orchestrator.poolStates().find((p) => p.name === 'heavy-io')!.used === 3, { what: 'flock to hold the 3 slots' });
    const release = path.join(station.root, 'release');
    const run = await orchestrator.run('until-file', [release, '0'], 'cli');
    await waitFor(() => runManager.get(run.runId)?.wait?.kind === 'pool', { what: 'the run to wait for a slot' });
    const pool = orchestrator.poolStates().find((p) => p.name === 'heavy-io')!;
    assert.ok(
      pool.slots.every((s) => s.holder?.foreign === true),
      'script-held slots show as foreign holders',
    );
    assert.equal(runManager.get(run.runId)!.status, 'waiting');
    // The script lets one slot go: the agent's run takes it.
    holders[1].stdin.end();
    await waitFor(() => runManager.get(run.runId)?.status === 'running', { what: 'the run to start', timeoutMs: 5000 });
    assert.equal(runManager.get(run.runId)!.slot, 1);

    // Now the script wants that slot back and must wait until the agent's run ends.
    const waiter = spawn('flock', [path.join(poolDir, 'slot_1.lock'), 'sh', '-c', 'echo got'], { stdio: ['ignore', 'pipe', 'inherit'] });
    let got = '';
    waiter.stdout.on('data', (d: Buffer) => {
      got += d.toString();
    });
    const waiterDone = new Promise<void>((resolve) => waiter.on('close', () => resolve()));
    // The kernel lists a blocked flock(2) waiter as "->" on the slot's inode: the script is waiting.
    const inode = fs.statSync(path.join(poolDir, 'slot_1.lock')).ino;
    await waitFor(
      () =>
        fs
          .readFileSync('/proc/locks', 'utf8')
          .split('\n')
          .some((l) => l.includes('->') && l.includes(`:${inode} `)),
      { what: 'flock to block on slot 1' },
    );
    assert.equal(waiter.exitCode, null, 'flock must not get a slot the agent holds');
    assert.equal(runManager.get(run.runId)!.status, 'running');
    fs.writeFileSync(release, '');
    await waiterDone;
    assert.equal(got.trim(), 'got');
    assert.equal((await orchestrator.waitRun(run.runId)).status, 'completed');
    for (const h of holders) h.stdin.end();
  } finally {
    await close();
  }
});
