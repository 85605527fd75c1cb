import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { makeTestEnv, startAgent, type TestEnv } from '../support/harness';
import { holderAndWaiter } from '../support/holderAndWaiter';
import { UNTIL_GO } from '../support/untilGo';

// A hangup stops the agent exactly as SIGTERM does: the "agent stopping" line, exit 0, the waiting
// run ends as it does on SIGTERM (never `owner-exited-while-waiting`), the running fetcher goes on.

const stations: TestEnv[] = [];
const leftovers: number[] = [];
after(() => {
  for (const pid of leftovers) {
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

interface Outcome {
  code: number | null;
  signal: NodeJS.Signals | null;
  stderr: string;
  waiting: [string, string | null];
  holder: string;
}

/** One run holding the only slot, one waiting for it; then `signal` to the real agent process. */
async function stopWith(signal: NodeJS.Signals): Promise<Outcome> {
  const t = makeTestEnv([{ name: 'long', pool: 'cpu-analysis', argv: UNTIL_GO }], {
    CRON_POOL_CPU_ANALYSIS_SLOTS: '1',
    QUANTILICA_LOG_LEVEL: 'info',
  });
  stations.push(t);
  const agent = await startAgent(t);
  try {
    const { ids, holder, runs } = await holderAndWaiter(t, 'long');
    if (holder.pid) leftovers.push(holder.pid);
    const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
      agent.child.once('exit', (code, sig) => resolve([code, sig])),
    );
    agent.child.kill(signal);
    const [code, sig] = await exited;
    const left = await runs();
    const waiting = left.find((r) => r.runId === ids[1])!;
    const outcome: Outcome = {
      code,
      signal: sig,
      stderr: agent.stderr(),
      waiting: [waiting.status, waiting.reason ?? null],
      holder: left.find((r) => r.runId === ids[0])!.status,
    };
    fs.mkdirSync(t.dataDir, { recursive: true });
    fs.writeFileSync(path.join(t.dataDir, 'go'), '');
    return outcome;
  } finally {
    if (agent.child.exitCode === null && agent.child.signalCode === null) agent.child.kill('SIGKILL');
  }
}

test(
  'SIGHUP to a real agent stops it exactly as SIGTERM: the stopping line, exit 0, the queue treated the same',
  { timeout: 180000 },
  async () => {
    const term = await stopWith('SIGTERM');
    const hup = await stopWith('SIGHUP');
    assert.deepEqual(
      [hup.code, hup.signal],
      [0, null],
      `the agent exits 0 on SIGHUP, not by the signal's default action; stderr: ${hup.stderr}`,
    );
    const stopping = hup.stderr.split('\n').find((l) => l.includes('agent stopping'));
    assert.ok(stopping !== undefined, `an "agent stopping" line: ${hup.stderr}`);
    assert.match(stopping, /SIGHUP/, 'the line names the signal');
    assert.match(hup.stderr, /agent stopped/);
    assert.notEqual(hup.waiting[1], 'owner-exited-while-waiting');
    assert.deepEqual(hup.waiting, term.waiting, 'the waiting run ends (or stays) as on SIGTERM');
    assert.equal(hup.holder, 'running', 'the running fetcher goes on, as on SIGTERM');
    assert.equal(term.holder, 'running');
  },
);
