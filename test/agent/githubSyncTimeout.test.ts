import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import type { NumberedOperatorEvent, RunInfo, Snapshot } from '../../shared/protocol';
import { connectAgent, type AgentClient } from '../../agent/client/agentClient';
import { memoryLogger } from '../support/memoryLogger';
import { GithubStore } from '../../agent/github/store/githubStore';
import { migrateGithub } from '../../agent/github/store/migrateGithub';
import { PostgresGithubDb } from '../../agent/github/store/postgresGithubDb';
import { GithubSimulator, type SimulatorOptions } from '../../simulator/github/githubSimulator';
import { newDatabase } from '../support/githubTestBed';
import { makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';
import { startTestPostgres, type TestPostgres } from '../support/postgres';
import { waitFor } from '../support/waitFor';

// A GitHub sync's timeoutSeconds counts working time only (holding its slot), never hibernation: a
// sync that sleeps longer than its timeout still completes, and keeps what is left of it across a
// kill -9 of the agent; a sync that works longer ends `failed` (timeout), its slot free at once.

let server: TestPostgres;
before(async () => {
  server = await startTestPostgres();
});
after(async () => {
  await server?.stop();
});

interface Station {
  env: TestEnv;
  sim: GithubSimulator;
  store: GithubStore;
  close(): Promise<void>;
}

async function station(sim: SimulatorOptions, sync: Record<string, unknown>): Promise<Station> {
  const simulator = new GithubSimulator(sim);
  const url = await simulator.start();
  const dbUrl = await newDatabase(server.url);
  const env = makeTestEnv([{ name: 'other', pool: 'network-light', argv: ['true'] }], {
    QUANTILICA_DATABASE_URL: dbUrl,
    QUANTILICA_GITHUB_API_URL: url,
    CRON_POOL_NETWORK_LIGHT_SLOTS: '1',
    CRON_POOL_NETWORK_LIGHT_TIMEOUT: '120',
  });
  const catalog = JSON.parse(fs.readFileSync(env.env.QUANTILICA_CATALOG!, 'utf8')) as { fetchers: object[] };
  catalog.fetchers.push({ name: 'github', kind: 'github-sync', pool: 'network-light', repos: simulator.repoNames, ...sync });
  fs.writeFileSync(env.env.QUANTILICA_CATALOG!, JSON.stringify(catalog));
  const db = new PostgresGithubDb({ url: dbUrl, logger: memoryLogger() });
  await migrateGithub(db);
  return {
    env,
    sim: simulator,
    store: new GithubStore(db),
    close: async () => {
      await simulator.stop();
      await db.close();
    },
  };
}

/** Every change of the sync's run the client is told of, with when it came. */
function watch(client: AgentClient): Array<{ at: number; run: RunInfo; used: number }> {
  const seen: Array<{ at: number; run: RunInfo; used: number }> = [];
  client.onChanged((event) => {
    const snap: Snapshot = event.snapshot;
    const run = snap.runs.find((r) => r.fetcher === 'github');
    if (run) seen.push({ at: Date.now(), run, used: snap.pools.find((p) => p.name === 'network-light')!.used });
  });
  return seen;
}

const connect = (env: TestEnv) => connectAgent(path.join(env.home, '.quantilica', 'agent.json'), { client: 'test' });

async function startSync(env: TestEnv): Promise<string> {
  const r = await runCli(env, ['run', 'github', '--detach', '--json']);
  assert.equal(r.code, 0, r.stderr);
  return (JSON.parse(r.stdout) as RunInfo).runId;
}

async function stop(agent: Awaited<ReturnType<typeof startAgent>>): Promise<void> {
  const exited = new Promise((resolve) => agent.child.once('exit', resolve));
  agent.child.kill('SIGTERM');
  await exited;
}

const DATA: SimulatorOptions = { repos: 8, pullRequestsPerRepo: 12, runsPerRepo: 7, jobsPerRun: 2, latencyMs: 5 };

test(
  'a sync under a timeout shorter than its hibernation completes, and keeps its working time left across a kill -9',
  { timeout: 240_000 },
  async () => {
    const TIMEOUT_S = 20;
    const WINDOW_S = 50;
    // The simulator's rate-limit window starts now (its clock set back to the window's start), so the
    // hibernation after the drain lasts most of the window: well beyond the timeout.
    const clockOffsetMs = -(Date.now() % (WINDOW_S * 1000));
    // Answers of 60 ms, two at a time: the first leg works long enough (30 requests) to be measured.
    const st = await station(
      { ...DATA, latencyMs: 60, windowSeconds: WINDOW_S, clockOffsetMs, drainAfter: { resource: 'core', requests: 30 } },
      { timeoutSeconds: TIMEOUT_S, concurrency: 2 },
    );
    let agent = await startAgent(st.env);
    let client = await connect(st.env);
    try {
      const seen = watch(client);
      const runId = await startSync(st.env);
      const firstLeg = await waitFor(() => seen.find((s) => s.run.runId === runId && s.run.status === 'running'), {
        what: 'the sync to run',
        timeoutMs: 30_000,
        intervalMs: 10,
      });
      assert.ok(firstLeg.run.deadline, 'a working sync shows its deadline');
      const firstLeft = Date.parse(firstLeg.run.deadline) - Date.parse(firstLeg.run.startedAt!);
      assert.ok(
        firstLeft > (TIMEOUT_S - 2) * 1000 && firstLeft <= TIMEOUT_S * 1000,
        `the first leg has the whole timeout: ${firstLeft} ms`,
      );
      const slept = await waitFor(
        () => seen.find((s) => s.run.runId === runId && s.run.status === 'waiting' && s.run.reason === 'hibernating'),
        { what: 'the sync to hibernate', timeoutMs: 60_000, intervalMs: 10 },
      );
      assert.equal(slept.run.deadline ?? null, null, 'no deadline runs while the sync hibernates');
      const until = Date.parse(slept.run.wait?.kind === 'hibernating' ? slept.run.wait.until : '');
      assert.ok(
        until - slept.at > (TIMEOUT_S + 5) * 1000,
        `the hibernation (until ${new Date(until).toISOString()}) is longer than the timeout`,
      );

      // kill -9 while it sleeps: the next agent wakes it with what the first leg left of the timeout.
      await client.close();
      agent.child.kill('SIGKILL');
      await new Promise((resolve) => agent.child.once('exit', resolve));
      agent = await startAgent(st.env);
      client = await connect(st.env);
      const seenAfter = watch(client);
      const resumed = await waitFor(() => seenAfter.find((s) => s.run.runId === runId && s.run.status === 'running' && s.run.deadline), {
        what: 'the adopted sync to resume',
        timeoutMs: WINDOW_S * 1000 + 30_000,
        intervalMs: 20,
      });
      // Both moments are when the client heard of them: the deadline can only be nearer than this.
      const worked = slept.at - firstLeg.at;
      assert.ok(worked > 600, `the first leg worked ${worked} ms`);
      const left = Date.parse(resumed.run.deadline!) - resumed.at;
      assert.ok(
        left <= TIMEOUT_S * 1000 - worked + 300,
        `the resume has the timeout less the first leg's work: ${left} ms left after ${worked} ms of work`,
      );
      assert.ok(left > (TIMEOUT_S * 1000 - worked) / 2, `the hibernation and the agent's absence were not counted: ${left} ms left`);

      const done = await client.waitRun(runId);
      assert.equal(done.status, 'completed', JSON.stringify(done));
      const wall = Date.parse(done.finishedAt!) - Date.parse(done.startedAt!);
      assert.ok(wall > TIMEOUT_S * 1000, `the sync took ${wall} ms from its start to its end, beyond its ${TIMEOUT_S} s timeout`);
      const row = (await st.store.syncOfRun(runId))!;
      assert.equal(row.status, 'completed');
    } finally {
      await client.close();
      await stop(agent);
      await st.close();
    }
  },
);

test(
  'a sync whose working time exceeds its timeout ends failed (timeout): slot free at once, the timeout event',
  { timeout: 180_000 },
  async () => {
    const TIMEOUT_S = 3;
    // Slow answers, one task at a time: the sync needs far more than its timeout.
    const st = await station(
      { repos: 8, pullRequestsPerRepo: 12, runsPerRepo: 7, jobsPerRun: 2, latencyMs: 400 },
      { timeoutSeconds: TIMEOUT_S, concurrency: 1 },
    );
    const agent = await startAgent(st.env);
    const client = await connect(st.env);
    try {
      const runId = await startSync(st.env);
      await waitFor(async () => ((await client.getSnapshot()).runs.find((r) => r.runId === runId)?.status === 'running' ? true : null), {
        what: 'the sync to run',
        timeoutMs: 30_000,
        intervalMs: 20,
      });
      // Queued behind the sync in the one-slot pool: it starts once the timeout frees the slot.
      const queued = await client.run('other');
      const done = await client.waitRun(runId);
      assert.equal(done.status, 'failed', JSON.stringify(done));
      assert.equal(done.reason, 'timeout');
      const wall = Date.parse(done.finishedAt!) - Date.parse(done.startedAt!);
      assert.ok(wall >= TIMEOUT_S * 1000 - 50 && wall < (TIMEOUT_S + 10) * 1000, `ended ${wall} ms after its start`);
      const other = await client.waitRun(queued.runId);
      assert.equal(other.status, 'completed');
      assert.ok(
        Date.parse(other.startedAt!) >= Date.parse(done.startedAt!) + TIMEOUT_S * 1000 - 50,
        'the other run waited for the slot until the timeout',
      );
      assert.ok(
        Date.parse(other.startedAt!) - Date.parse(done.finishedAt!) < 5_000,
        `the slot went to the other run at once (it started ${Date.parse(other.startedAt!) - Date.parse(done.finishedAt!)} ms after the sync's end)`,
      );
      const row = (await st.store.syncOfRun(runId))!;
      assert.deepEqual([row.status, row.reason], ['failed', 'timeout']);
      // The operator events of a fetcher's timeout: `failed` and `timeout`, with the reason.
      const r = await runCli(st.env, ['events', '--json', '--limit', '1000']);
      assert.equal(r.code, 0, r.stderr);
      const events = r.stdout
        .trim()
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as NumberedOperatorEvent)
        .filter((e) => e.runId === runId);
      assert.deepEqual(
        events.map((e) => [e.event, e.reason]).filter(([e]) => e === 'failed' || e === 'timeout'),
        [
          ['failed', 'timeout'],
          ['timeout', 'timeout'],
        ],
      );
    } finally {
      await client.close();
      await stop(agent);
      await st.close();
    }
  },
);
