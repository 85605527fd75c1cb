import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { connectAgent, type AgentClient } from '../../agent/client/agentClient';
import type { RunInfo, Snapshot } from '../../shared/protocol';
import { makeTestEnv, startAgent, type TestEnv } from '../support/harness';
import { waitFor } from '../support/waitFor';

// A kill -9 defect this guards against: an agent killed right after a run was queued recorded a run that really
// ran (status file 0, log complete) as `failed` / `owner-exited-while-waiting`, and the tree named
// the dead agent as a slot holder. The agent now records a durable "starting" intent before the spawn
// and the next agent adopts from the status file. Here the agent is killed at several moments between
// the queue and the fetcher's end; the fetcher leaves its own proof that it ran (a marker file), so
// the truth does not come from the agent under test.

const FINAL = new Set(['completed', 'failed', 'cancelled', 'skipped']);

function station(marks: string): TestEnv {
  // 1.5 s of work after the marker: long enough for the kill to land while the fetcher runs.
  const script = 'touch "$MARKS/$QUANTILICA_RUN_ID.ran"; echo "proof line"; sleep 1.5; touch "$MARKS/$QUANTILICA_RUN_ID.done"; exit 0';
  return makeTestEnv([{ name: 'proof', pool: 'network-light', argv: ['/bin/bash', '-c', script], env: { MARKS: marks } }], {
    QUANTILICA_HEARTBEAT_SECONDS: '0.5',
  });
}

/** True while any live process carries this run's id in its environment (the fetcher or its wrapper). */
function runProcessesAlive(runId: string): boolean {
  const marker = Buffer.from(`QUANTILICA_RUN_ID=${runId}\0`);
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (/^\d+ \(.*\) Z/.test(fs.readFileSync(`/proc/${entry}/stat`, 'utf8'))) continue;
      if (fs.readFileSync(`/proc/${entry}/environ`).includes(marker)) return true;
    } catch {
      // Gone meanwhile, or not ours to read.
    }
  }
  return false;
}

/** How the dead agent left the run in its store (status/reason), read before the next agent starts. */
function leftAs(env: TestEnv, runId: string): string {
  try {
    const db = new Database(env.env.QUANTILICA_TELEMETRY_SPOOL, { readonly: true, fileMustExist: true });
    try {
      const body = db.prepare('SELECT body FROM runs WHERE run_id = ?').pluck().get(runId) as string | undefined;
      const run = body ? (JSON.parse(body) as RunInfo) : null;
      return run ? `${run.status}/${run.reason ?? ''}` : 'not-recorded';
    } finally {
      db.close();
    }
  } catch (err) {
    return `unreadable (${err instanceof Error ? err.message : String(err)})`;
  }
}

function deadAgentHolders(snapshot: Snapshot, deadPid: number): string[] {
  return snapshot.pools.flatMap((p) => p.slots.filter((s) => s.holder?.pid === deadPid).map((s) => `${p.name}/${s.index}`));
}

/**
 * Queues one run, kills the agent with SIGKILL when `killWhen` says so, lets the fetcher finish or
 * not, starts the next agent and returns the run as that agent records it, with the proof of whether
 * the fetcher ran. Every snapshot the next agent gives meanwhile is checked for the dead agent's pid.
 */
async function killAndAdopt(
  env: TestEnv,
  marks: string,
  killWhen: (run: RunInfo) => Promise<void>,
  startNextWhen: 'at-once' | 'after-the-fetcher',
): Promise<{ run: RunInfo; ran: boolean; deadPid: number; left: string }> {
  const connectionFile = path.join(env.home, '.quantilica', 'agent.json');
  const first = await startAgent(env);
  const deadPid = first.child.pid!;
  const exited = new Promise((resolve) => first.child.once('exit', resolve));
  let client: AgentClient | null = await connectAgent(connectionFile, { client: 'kill-after-queue' });
  let queued: RunInfo;
  try {
    queued = await client.run('proof');
    await killWhen(queued);
  } finally {
    first.child.kill('SIGKILL');
    await exited;
    await client.close().catch(() => {});
    client = null;
  }
  if (startNextWhen === 'after-the-fetcher') {
    await waitFor(() => !runProcessesAlive(queued.runId), { what: 'the orphaned fetcher to end', timeoutMs: 20_000, intervalMs: 50 });
  }
  const left = leftAs(env, queued.runId);
  const next = await startAgent(env);
  try {
    client = await connectAgent(connectionFile, { client: 'kill-after-queue' });
    const c = client;
    const run = await waitFor(
      async () => {
        const snapshot = await c.getSnapshot();
        assert.deepEqual(deadAgentHolders(snapshot, deadPid), [], `no slot names the dead agent (pid ${deadPid})`);
        const r = (await c.listRuns(50)).find((x) => x.runId === queued.runId);
        return r && FINAL.has(r.status) ? r : undefined;
      },
      { what: `run ${queued.runId} to be final in the next agent`, timeoutMs: 30_000, intervalMs: 50 },
    ).catch((err: unknown) => {
      throw new Error(`${String(err)}; the next agent said: ${next.stderr().slice(-2000)}`);
    });
    assert.deepEqual(deadAgentHolders(await c.getSnapshot(), deadPid), [], 'no slot names the dead agent after the run ended');
    // Whatever was spawned has ended before the proof is read: a fetcher that starts late still counts.
    await waitFor(() => !runProcessesAlive(queued.runId), { what: 'no process of the run left', timeoutMs: 20_000, intervalMs: 50 });
    return { run, ran: fs.existsSync(path.join(marks, `${queued.runId}.ran`)), deadPid, left };
  } finally {
    await client?.close().catch(() => {});
    next.child.kill('SIGTERM');
    await new Promise((resolve) => next.child.once('exit', resolve));
  }
}

function assertTrueOutcome(run: RunInfo, ran: boolean, marks: string): void {
  if (ran) {
    assert.deepEqual(
      [run.status, run.exitCode, run.reason ?? null],
      ['completed', 0, null],
      `the fetcher ran to its end (marker ${run.runId}.done: ${fs.existsSync(path.join(marks, `${run.runId}.done`))}), so the run completed: ${JSON.stringify(run)}`,
    );
    assert.ok(fs.existsSync(path.join(marks, `${run.runId}.done`)), 'the fetcher outlived the agent and finished');
    assert.notEqual(run.startedAt, null, 'a run that ran has a start time');
  } else {
    assert.deepEqual(
      [run.status, run.reason],
      ['failed', 'owner-exited-while-waiting'],
      `the fetcher never ran, so the run never started: ${JSON.stringify(run)}`,
    );
  }
}

test(
  'kill -9 of the agent as the fetcher starts: the next agent records the run completed with exit 0 and never names the dead agent as a slot holder',
  { timeout: 180_000 },
  async (t) => {
    for (const startNextWhen of ['at-once', 'after-the-fetcher'] as const) {
      const marks = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-marks-'));
      const env = station(marks);
      t.after(() => {
        fs.rmSync(env.root, { recursive: true, force: true });
        fs.rmSync(marks, { recursive: true, force: true });
      });
      // The kill lands the moment the fetcher's first command ran: the spawn happened, the agent may
      // not yet have recorded the pid (the window of the defect).
      const { run, ran, left } = await killAndAdopt(
        env,
        marks,
        (queued) =>
          waitFor(() => fs.existsSync(path.join(marks, `${queued.runId}.ran`)), {
            what: 'the fetcher to start',
            timeoutMs: 20_000,
            intervalMs: 2,
          }).then(() => undefined),
        startNextWhen,
      );
      t.diagnostic(`left ${left}; next agent started ${startNextWhen}: ${run.status} exit ${run.exitCode} ${run.reason ?? ''}`);
      assert.equal(ran, true);
      assertTrueOutcome(run, ran, marks);
    }
  },
);

test(
  'kill -9 of the agent right after a run is queued, at several delays: each run is recorded with its true outcome',
  { timeout: 300_000 },
  async (t) => {
    const marks = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-marks-'));
    const env = station(marks);
    t.after(() => {
      fs.rmSync(env.root, { recursive: true, force: true });
      fs.rmSync(marks, { recursive: true, force: true });
    });
    const seen: string[] = [];
    // A sweep: where the spawn falls after the queue depends on the machine's load. The diagnostic
    // says how the dead agent left each run (`waiting/starting` is the window of the defect).
    for (const delayMs of [0, 5, 10, 15, 20, 30, 40, 60, 100]) {
      const { run, ran, left } = await killAndAdopt(
        env,
        marks,
        () => new Promise((resolve) => setTimeout(resolve, delayMs)),
        'after-the-fetcher',
      );
      seen.push(`${delayMs} ms: left ${left}, ran=${ran}, recorded ${run.status}/${run.exitCode}/${run.reason ?? ''}`);
      assertTrueOutcome(run, ran, marks);
    }
    t.diagnostic(seen.join('; '));
  },
);
