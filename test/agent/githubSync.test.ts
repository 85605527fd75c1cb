import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { StageProgress } from '../../agent/github/githubSyncStatus';
import { runGithubSync } from '../../agent/github/runGithubSync';
import { startTestPostgres, type TestPostgres } from '../support/postgres';
import { githubBed, storedCounts } from '../support/githubTestBed';
import { waitFor } from '../support/waitFor';

// The sync against the simulator on a real PostgreSQL: a whole run, a task that raises, and faults.

const TOKEN = 'ghp_testtoken_never_shown_0123456789';
let server: TestPostgres;

before(async () => {
  server = await startTestPostgres();
});
after(async () => {
  await server?.stop();
});

const shape = { pullRequestsPerRepo: 12, runsPerRepo: 7, jobsPerRun: 2 };

test(
  'a whole sync: every record stored once, counters equal to rows and requests, all checkpoints, no token anywhere',
  { timeout: 120_000 },
  async () => {
    const bed = await githubBed(server.url, { repos: 8, ...shape, latencyMs: 2 });
    try {
      const outcome = await runGithubSync({
        store: bed.store,
        client: { baseUrl: bed.url, token: TOKEN, pageSize: 5 },
        repos: bed.sim.repoNames,
      });
      assert.equal(outcome.kind, 'completed');
      if (outcome.kind !== 'completed') return;
      const rows = await storedCounts(bed.store);
      assert.deepEqual(rows, { pullRequests: 8 * 12, runs: 8 * 7, jobs: 8 * 7 * 2 });
      const c = outcome.summary.counters;
      assert.equal(c.records_collected, rows.pullRequests + rows.runs + rows.jobs);
      assert.equal(c.records_created, c.records_collected);
      assert.equal(c.requests_made, bed.sim.served.length);
      // 12 PRs in pages of 5: 3 requests; 7 runs: 2 pages; one jobs request per run.
      assert.equal(bed.sim.served.length, 8 * (3 + 2 + 7));
      assert.equal(c.hibernations, 0);
      for (const stage of ['changes', 'checks'] as const)
        assert.deepEqual(
          { ...outcome.summary.stages[stage], notReachedRepos: [] },
          { done: 8, notReached: 0, total: 8, notReachedRepos: [] },
        );
      assert.equal(outcome.summary.quota.core?.limit, 5000);
      assert.equal(outcome.summary.quota.graphql?.remaining, 5000 - 8 * 3);
      const everything = JSON.stringify([
        outcome,
        await bed.store.db.query('SELECT * FROM github.sync'),
        await bed.store.checkpoints(outcome.syncId),
      ]);
      assert.ok(!everything.includes(TOKEN), 'the token leaked into the status or the database');
    } finally {
      await bed.close();
    }
  },
);

test('one task raising is counted not reached with its reason; its siblings complete', { timeout: 120_000 }, async () => {
  const bed = await githubBed(server.url, { repos: 4, ...shape });
  try {
    const repos = [...bed.sim.repoNames.slice(0, 2), 'sim-org/does-not-exist', ...bed.sim.repoNames.slice(2)];
    const outcome = await runGithubSync({ store: bed.store, client: { baseUrl: bed.url, token: null, pageSize: 50 }, repos });
    assert.equal(outcome.kind, 'completed');
    if (outcome.kind !== 'completed') return;
    for (const stage of ['changes', 'checks'] as const) {
      const s: StageProgress = outcome.summary.stages[stage];
      assert.equal(s.done, 4, stage);
      assert.equal(s.notReached, 1, stage);
      assert.equal(s.total, 5, stage);
      assert.deepEqual(s.notReachedRepos, [{ repo: 'sim-org/does-not-exist', reason: 'not-found' }]);
    }
    assert.deepEqual(await storedCounts(bed.store), { pullRequests: 4 * 12, runs: 4 * 7, jobs: 4 * 7 * 2 });
  } finally {
    await bed.close();
  }
});

test(
  '5xx, malformed records and dropped connections are recorded per repository; no crash; a truthful summary',
  { timeout: 120_000 },
  async () => {
    const bed = await githubBed(server.url, {
      repos: 6,
      ...shape,
      faults: {
        'sim-org/repo-001': { kind: 'server-error', stage: 'changes' },
        'sim-org/repo-002': { kind: 'malformed', stage: 'checks' },
        'sim-org/repo-003': { kind: 'drop', stage: 'checks' },
        'sim-org/repo-004': { kind: 'malformed', stage: 'changes' },
      },
    });
    try {
      const outcome = await runGithubSync({
        store: bed.store,
        client: { baseUrl: bed.url, token: null, pageSize: 5 },
        repos: bed.sim.repoNames,
        taskTimeoutMs: 30_000,
      });
      assert.equal(outcome.kind, 'completed');
      if (outcome.kind !== 'completed') return;
      const { changes, checks } = outcome.summary.stages;
      assert.deepEqual(changes.notReachedRepos, [
        { repo: 'sim-org/repo-001', reason: 'server-error' },
        { repo: 'sim-org/repo-004', reason: 'malformed-answer' },
      ]);
      assert.deepEqual(checks.notReachedRepos, [
        { repo: 'sim-org/repo-002', reason: 'malformed-answer' },
        { repo: 'sim-org/repo-003', reason: 'connection-lost' },
      ]);
      assert.equal(changes.done, 4);
      assert.equal(checks.done, 4);
      // Nothing of a malformed page is stored: repo-004 has no pull requests, repo-002 no runs.
      const prs = await bed.store.db.query<{ repo: string; n: number }>(
        'SELECT repo, count(*)::int AS n FROM github.pull_request GROUP BY repo ORDER BY repo',
      );
      assert.deepEqual(
        prs.map((r) => r.repo),
        ['sim-org/repo-002', 'sim-org/repo-003', 'sim-org/repo-005', 'sim-org/repo-006'],
      );
      const runs = await bed.store.db.query<{ repo: string }>('SELECT DISTINCT repo FROM github.workflow_run ORDER BY repo');
      assert.deepEqual(
        runs.map((r) => r.repo),
        ['sim-org/repo-001', 'sim-org/repo-004', 'sim-org/repo-005', 'sim-org/repo-006'],
      );
      const rows = await storedCounts(bed.store);
      assert.equal(outcome.summary.counters.records_collected, rows.pullRequests + rows.runs + rows.jobs);
      assert.equal(outcome.summary.counters.requests_made, bed.sim.served.length);
    } finally {
      await bed.close();
    }
  },
);

test(
  'a task past its declared timeout is killed and counted not reached (timeout); the others complete',
  { timeout: 120_000 },
  async () => {
    const bed = await githubBed(server.url, {
      repos: 4,
      ...shape,
      slowMs: 20_000,
      faults: { 'sim-org/repo-002': { kind: 'slow', stage: 'checks' } },
    });
    try {
      const started = Date.now();
      const outcome = await runGithubSync({
        store: bed.store,
        client: { baseUrl: bed.url, token: null, pageSize: 50 },
        repos: bed.sim.repoNames,
        taskTimeoutMs: 3_000,
      });
      assert.ok(Date.now() - started < 19_000, 'the slow task held the stage');
      assert.equal(outcome.kind, 'completed');
      if (outcome.kind !== 'completed') return;
      assert.deepEqual(outcome.summary.stages.checks.notReachedRepos, [{ repo: 'sim-org/repo-002', reason: 'timeout' }]);
      assert.equal(outcome.summary.stages.checks.done, 3);
      assert.equal(outcome.summary.stages.changes.done, 4);
    } finally {
      await bed.close();
    }
  },
);

test('cancel: the signal aborts the sync; the row ends cancelled and nothing is counted not reached', { timeout: 120_000 }, async () => {
  const bed = await githubBed(server.url, { repos: 10, ...shape, latencyMs: 100 });
  try {
    const controller = new AbortController();
    const running = runGithubSync({
      store: bed.store,
      client: { baseUrl: bed.url, token: null, pageSize: 5 },
      repos: bed.sim.repoNames,
      signal: controller.signal,
    });
    await waitFor(() => bed.sim.served.length >= 10, { timeoutMs: 30_000, what: 'ten requests served' });
    controller.abort(new Error('cancelled'));
    const outcome = await running;
    assert.deepEqual(outcome.kind === 'failed' ? outcome.reason : outcome.kind, 'cancelled');
    const row = (await bed.store.latestSync())!;
    assert.equal(row.status, 'cancelled');
    assert.equal((await bed.store.checkpoints(row.id)).filter((c) => c.state === 'not-reached').length, 0);
    const served = bed.sim.served.length;
    assert.ok(served < 10 * 12, `${served} requests: the cancel did not stop the sync`);
  } finally {
    await bed.close();
  }
});
