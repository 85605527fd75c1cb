import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import type { RunInfo, Snapshot } from '../../shared/protocol';
import { connectAgent } from '../../agent/client/agentClient';
import { memoryLogger } from '../support/memoryLogger';
import { runGithubSync } from '../../agent/github/runGithubSync';
import { GithubStore } from '../../agent/github/store/githubStore';
import { migrateGithub } from '../../agent/github/store/migrateGithub';
import { PostgresGithubDb } from '../../agent/github/store/postgresGithubDb';
import { GithubSimulator, type SimulatorOptions } from '../../simulator/github/githubSimulator';
import { githubBed, newDatabase } from '../support/githubTestBed';
import { makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';
import { startTestPostgres, type TestPostgres } from '../support/postgres';
import { simulatorProcess } from '../support/simulatorProcess';
import { runOf, startSync } from '../support/githubRunCli';
import { waitFor } from '../support/waitFor';

// The GitHub sync as a catalog entry run by the agent: its network-light slot is the
// agent's own flock while it works and is free while it hibernates; a kill -9 during the hibernation
// loses nothing and wastes no request; the agent keeps answering while a sync runs at concurrency 5.

let server: TestPostgres;
before(async () => {
  server = await startTestPostgres();
});
after(async () => {
  await server?.stop();
});

const DATA: SimulatorOptions = { repos: 8, pullRequestsPerRepo: 12, runsPerRepo: 7, jobsPerRun: 2, latencyMs: 5 };

interface Station {
  env: TestEnv;
  sim: GithubSimulator;
  store: GithubStore;
  dbUrl: string;
  close(): Promise<void>;
}

async function station(
  sim: SimulatorOptions,
  extra: Record<string, string> = {},
  concurrency = 5,
  external?: { url: string; repos: string[] },
): Promise<Station> {
  const simulator = new GithubSimulator(sim);
  const url = external?.url ?? (await simulator.start());
  const dbUrl = await newDatabase(server.url);
  const env = makeTestEnv([{ name: 'other', pool: 'network-light', argv: ['true'] }], {
    QUANTILICA_DATABASE_URL: dbUrl,
    QUANTILICA_GITHUB_API_URL: url,
    CRON_POOL_NETWORK_LIGHT_SLOTS: '1',
    CRON_POOL_NETWORK_LIGHT_TIMEOUT: '120',
    ...extra,
  });
  // The harness writes fetchers only; the sync entry is added to its catalog file.
  const catalog = JSON.parse(fs.readFileSync(env.env.QUANTILICA_CATALOG!, 'utf8')) as { fetchers: object[] };
  catalog.fetchers.push({
    name: 'github',
    kind: 'github-sync',
    pool: 'network-light',
    repos: external?.repos ?? simulator.repoNames,
    concurrency,
  });
  fs.writeFileSync(env.env.QUANTILICA_CATALOG!, JSON.stringify(catalog));
  const db = new PostgresGithubDb({ url: dbUrl, logger: memoryLogger() });
  await migrateGithub(db);
  return {
    env,
    sim: simulator,
    store: new GithubStore(db),
    dbUrl,
    close: async () => {
      if (!external) await simulator.stop();
      await db.close();
    },
  };
}

/** Requests a sync of the same data makes without any limit: what a sync with hibernations must not exceed. */
async function baselineRequests(): Promise<number> {
  const bed = await githubBed(server.url, DATA);
  try {
    const outcome = await runGithubSync({ store: bed.store, client: { baseUrl: bed.url, token: null }, repos: bed.sim.repoNames });
    assert.equal(outcome.kind, 'completed');
    return okServed(bed.sim);
  } finally {
    await bed.close();
  }
}

const okServed = (sim: GithubSimulator) => sim.served.filter((r) => r.status === 200 && !r.limited).length;

/**
 * Waits for the sync's row to say it hibernates, read from its store: a hibernation lasts only until
 * the window's reset, and a CLI poll on a loaded machine (a node start per call) can miss it whole.
 */
const hibernating = (st: { store: GithubStore }, runId: string) =>
  waitFor(
    async () => {
      const row = await st.store.syncOfRun(runId);
      return row && row.hibernatingUntil !== null && row.hibernatingUntil > Date.now() ? row : null;
    },
    { what: 'the sync to hibernate', timeoutMs: 120_000, intervalMs: 25 },
  );

test("the slot is the sync's while it works, free while it hibernates, and taken again on resume", { timeout: 180_000 }, async () => {
  const st = await station({ ...DATA, windowSeconds: 15, drainAfter: { resource: 'core', requests: 30 } });
  const agent = await startAgent(st.env);
  const client = await connectAgent(path.join(st.env.home, '.quantilica', 'agent.json'), { client: 'test' });
  try {
    const seen: Array<{
      at: number;
      run: RunInfo;
      sync: Snapshot['sync'];
      status: string;
      reason: string | null;
      used: number;
      holder: string | null;
    }> = [];
    client.onChanged((event) => {
      const snap: Snapshot = event.snapshot;
      const run = snap.runs.find((r) => r.fetcher === 'github');
      const pool = snap.pools.find((p) => p.name === 'network-light')!;
      if (run)
        seen.push({
          at: Date.now(),
          run,
          sync: snap.sync,
          status: run.status,
          reason: run.reason,
          used: pool.used,
          holder: pool.slots[0]?.holder?.runId ?? null,
        });
    });
    const runId = await startSync(st.env);
    await waitFor(() => (seen.some((s) => s.status === 'running') ? true : null), {
      what: 'the sync to run',
      timeoutMs: 30_000,
      intervalMs: 10,
    });
    // Queued behind the sync in the one-slot pool: it can start only when the sync lets the slot go.
    const queued = await client.run('other');
    // From the change events, not by polling: a hibernation until a near reset can be short.
    const slept = await waitFor(() => seen.find((s) => s.run.runId === runId && s.status === 'waiting' && s.reason === 'hibernating'), {
      what: 'the sync to hibernate',
      timeoutMs: 60_000,
      intervalMs: 20,
    });
    const asleep = slept.run;
    assert.equal(asleep.wait?.kind, 'hibernating');
    assert.equal(asleep.slot, null);
    // The snapshot's sync part tells when and on which budget.
    assert.equal(slept.sync?.runId, runId);
    assert.equal(slept.sync?.budget, 'core');
    assert.ok(slept.sync?.hibernatingUntil !== null && Date.parse(slept.sync.hibernatingUntil) > slept.at - 1000);
    // The other network-light run took the one slot while the sync slept, before it woke up.
    const otherRun = await client.waitRun(queued.runId);
    assert.equal(otherRun.status, 'completed');
    const sleptAt = seen.find((s) => s.status === 'waiting' && s.reason === 'hibernating')!.at;
    const wokeAt = seen.find((s) => s.at >= sleptAt && s.status === 'running')?.at ?? Infinity;
    const otherStarted = Date.parse(otherRun.startedAt!);
    assert.ok(
      otherStarted >= sleptAt - 1000 && otherStarted <= wokeAt,
      `the other run started at ${otherStarted}, the sync slept at ${sleptAt} and woke at ${wokeAt}`,
    );

    const done = await waitFor(
      async () => {
        const run = await runOf(st.env, runId);
        return run.status === 'completed' || run.status === 'failed' ? run : null;
      },
      { what: 'the sync to complete', timeoutMs: 90_000, intervalMs: 200 },
    );
    assert.equal(done.status, 'completed', JSON.stringify(done));
    assert.equal(done.exitCode, 0);
    // Held while it ran (before and after the hibernation), free in between.
    const running = seen.filter((s) => s.status === 'running');
    assert.ok(
      running.some((s) => s.holder === runId),
      'the sync held the slot while it ran',
    );
    const firstWait = seen.findIndex((s) => s.status === 'waiting' && s.used === 0);
    assert.ok(firstWait >= 0, 'the slot was free while the sync hibernated');
    assert.ok(
      seen.slice(firstWait).some((s) => s.status === 'running' && s.holder === runId),
      'the resume took the slot again',
    );
    const sync = (await st.store.syncOfRun(runId))!;
    assert.equal(sync.status, 'completed');
    assert.ok(sync.hibernations >= 1);
    // Telemetry like a fetcher's, plus the hibernation and the resume.
    const flushed = await runCli(st.env, ['flush']);
    assert.equal(flushed.code, 0, flushed.stderr);
    const events = (
      await st.store.db.query<{ event: string }>('SELECT event FROM core.task_run_log WHERE run_id = $1 ORDER BY at', [runId])
    ).map((r) => r.event);
    for (const e of ['start', 'hibernated', 'resumed', 'finish']) assert.ok(events.includes(e), `${e} in ${events.join(',')}`);
    assert.equal(events.filter((e) => e === 'hibernated').length, sync.hibernations);
    const taskRun = await st.store.db.query<{ status: string }>('SELECT status FROM core.task_run WHERE run_id = $1', [runId]);
    assert.equal(taskRun[0]?.status, 'completed');
  } finally {
    await client.close();
    agent.child.kill('SIGTERM');
    await new Promise((resolve) => agent.child.once('exit', resolve));
    await st.close();
  }
});

test(
  'kill -9 of the agent during the hibernation: the next agent resumes at the wake-up time; no request wasted',
  { timeout: 240_000 },
  async () => {
    const expected = await baselineRequests();
    // A 30 s window: the hibernation (until the window's reset) lasts long enough to kill the agent in it.
    const st = await station({ ...DATA, windowSeconds: 30, drainAfter: { resource: 'core', requests: 30 } });
    let agent = await startAgent(st.env);
    try {
      const runId = await startSync(st.env);
      await hibernating(st, runId);
      const row = (await st.store.syncOfRun(runId))!;
      assert.ok(row.hibernatingUntil !== null);
      const until = row.hibernatingUntil;
      agent.child.kill('SIGKILL');
      await new Promise((resolve) => agent.child.once('exit', resolve));
      const servedAtKill = st.sim.served.length;
      agent = await startAgent(st.env);
      const done = await waitFor(
        async () => {
          const run = await runOf(st.env, runId);
          return run.status === 'completed' || run.status === 'failed' || run.status === 'cancelled' ? run : null;
        },
        { what: 'the adopted sync to complete', timeoutMs: 120_000, intervalMs: 250 },
      );
      assert.equal(done.status, 'completed', JSON.stringify(done));
      // Nothing asked between the kill and the wake-up time (a millisecond of timer slack aside).
      const after = st.sim.served.slice(servedAtKill);
      assert.ok(after.length > 0);
      assert.ok(
        after.every((r) => r.at >= until - 5),
        `a request was made before the wake-up time: ${after[0].at} < ${until}`,
      );
      const sync = (await st.store.syncOfRun(runId))!;
      assert.equal(sync.status, 'completed');
      assert.equal(okServed(st.sim), expected, 'answered requests equal a run without the limit');
      assert.ok(sync.hibernations >= 1);
    } finally {
      agent.child.kill('SIGTERM');
      await new Promise((resolve) => agent.child.once('exit', resolve));
      await st.close();
    }
  },
);

test(
  'the agent keeps answering status while a sync runs at concurrency 5 on PostgreSQL (every answer well within 2 s)',
  { timeout: 180_000 },
  async (t) => {
    // 80 repositories: a sync long enough for 200 status calls, so that p99 is a percentile (the
    // second slowest), not the one slowest call of a few dozen.
    const sim = await simulatorProcess(['--repos', '80', '--pull-requests', '12', '--runs', '7', '--jobs', '2', '--latency', '25']);
    const st = await station(DATA, {}, 5, sim);
    const agent = await startAgent(st.env);
    const client = await connectAgent(path.join(st.env.home, '.quantilica', 'agent.json'), { client: 'test' });
    try {
      const idle: number[] = [];
      for (let i = 0; i < 20; i++) {
        const started = process.hrtime.bigint();
        await client.getSnapshot();
        idle.push(Number(process.hrtime.bigint() - started) / 1e6);
      }
      t.diagnostic(`status with no sync: ${idle.map((x) => x.toFixed(0)).join(' ')} ms`);
      const runId = await startSync(st.env);
      await waitFor(async () => ((await runOf(st.env, runId)).status === 'running' ? true : null), {
        what: 'the sync to run',
        timeoutMs: 30_000,
        intervalMs: 50,
      });
      const times: number[] = [];
      for (let i = 0; i < 200; i++) {
        const started = process.hrtime.bigint();
        const snap = await client.getSnapshot();
        times.push(Number(process.hrtime.bigint() - started) / 1e6);
        if (snap.runs.find((r) => r.runId === runId)?.status !== 'running') break;
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      const run = await runOf(st.env, runId);
      assert.ok(times.length >= 100, `the sync ended after ${times.length} status calls; it must outlast the measure (${run.status})`);
      times.sort((a, b) => a - b);
      const p99 = times[Math.min(times.length - 1, Math.ceil(times.length * 0.99) - 1)];
      t.diagnostic(`times: ${times.map((x) => x.toFixed(0)).join(' ')}`);
      t.diagnostic(
        `status during the sync: ${times.length} calls, median ${times[Math.floor(times.length / 2)].toFixed(1)} ms, p99 ${p99.toFixed(1)} ms`,
      );
      // A test's bound is one only a stalled event loop breaks (a loaded CI machine answers in tens of
      // ms, a blocked one not at all): the latency target (p99 < 100 ms) is measured by a benchmark.
      assert.ok(
        times.at(-1)! < 2000,
        `the slowest status answer took ${times.at(-1)!.toFixed(1)} ms during the sync, p99 ${p99.toFixed(1)} ms (idle: ${idle.map((x) => x.toFixed(0)).join(' ')} ms)`,
      );
      const done = await waitFor(
        async () => {
          const r = await runOf(st.env, runId);
          return r.status !== 'running' && r.status !== 'waiting' ? r : null;
        },
        { what: 'the sync to end', timeoutMs: 120_000, intervalMs: 250 },
      );
      assert.equal(done.status, 'completed', JSON.stringify(done));
    } finally {
      await client.close();
      agent.child.kill('SIGTERM');
      await new Promise((resolve) => agent.child.once('exit', resolve));
      await st.close();
      await sim.stop();
    }
  },
);
