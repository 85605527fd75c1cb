import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { BudgetTracker } from '../../agent/github/budgetTracker';
import { runGithubSync, type GithubSyncOutcome } from '../../agent/github/runGithubSync';
import type { SimulatorOptions } from '../../simulator/github/githubSimulator';
import { githubBed, storedCounts, type GithubBed } from '../support/githubTestBed';
import { startTestPostgres, type TestPostgres } from '../support/postgres';
import { waitFor } from '../support/waitFor';

// ADR 0006 item 5 against the simulator on a real PostgreSQL: stop the stage, no checkpoint for the
// unfinished, wake at the (skew-corrected) reset, resume without asking again for anything stored.

let server: TestPostgres;
before(async () => {
  server = await startTestPostgres();
});
after(async () => {
  await server?.stop();
});

const CONCURRENCY = 5;
const base: SimulatorOptions = { repos: 8, pullRequestsPerRepo: 12, runsPerRepo: 7, jobsPerRun: 2, latencyMs: 3, windowSeconds: 3 };

interface Legs {
  outcomes: GithubSyncOutcome[];
  hibernatedAt: number[];
}

/** Runs a sync and, as its caller must, wakes it at each wake-up time until it ends. */
async function syncToTheEnd(bed: GithubBed, beforeResume?: (syncId: string) => Promise<void>): Promise<Legs> {
  const budgets = new BudgetTracker();
  const client = { baseUrl: bed.url, token: null, pageSize: 5 };
  const outcomes: GithubSyncOutcome[] = [];
  const hibernatedAt: number[] = [];
  let outcome = await runGithubSync({ store: bed.store, client, repos: bed.sim.repoNames, budgets, concurrency: CONCURRENCY });
  outcomes.push(outcome);
  while (outcome.kind === 'hibernate') {
    hibernatedAt.push(Date.now());
    const { until, syncId } = outcome;
    if (beforeResume) await beforeResume(syncId);
    await waitFor(() => Date.now() >= until, { timeoutMs: 30_000, intervalMs: 20, what: 'the wake-up time' });
    outcome = await runGithubSync({ store: bed.store, client, resume: syncId, budgets, concurrency: CONCURRENCY });
    outcomes.push(outcome);
    assert.ok(outcomes.length < 10, 'the sync keeps hibernating');
  }
  return { outcomes, hibernatedAt };
}

const ok = (bed: GithubBed) => bed.sim.served.filter((r) => r.status === 200 && !r.limited);

async function baseline(): Promise<{ ok: number; rows: Awaited<ReturnType<typeof storedCounts>> }> {
  const bed = await githubBed(server.url, base);
  try {
    const legs = await syncToTheEnd(bed);
    assert.equal(legs.outcomes.length, 1);
    return { ok: ok(bed).length, rows: await storedCounts(bed.store) };
  } finally {
    await bed.close();
  }
}

async function limitInTheChecks(clockOffsetMs: number): Promise<void> {
  const reference = await baseline();
  // Another consumer of the token empties the core window in the middle of the checks stage
  // (8 repos x (2 pages of runs + 7 jobs) = 72 core requests; the 31st finds nothing left).
  const bed = await githubBed(server.url, { ...base, clockOffsetMs, drainAfter: { resource: 'core', requests: 30 } });
  try {
    let savedExpected = 0;
    const legs = await syncToTheEnd(bed, async (syncId) => {
      // What the resume must not ask again: jobs stored for runs of repositories left without checkpoint.
      const rows = await bed.store.db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM github.workflow_run r WHERE r.jobs_stored_at IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM github.checkpoint c WHERE c.sync_id = $1 AND c.repo = r.repo AND c.stage = 'checks' AND c.state = 'done')`,
        [syncId],
      );
      savedExpected += rows[0].n;
      // No checkpoint for the unfinished, and nothing counted as not reached: they are pending.
      const checks = (await bed.store.checkpoints(syncId)).filter((c) => c.stage === 'checks');
      assert.ok(checks.filter((c) => c.state === 'done').length < 8);
      assert.equal(checks.filter((c) => c.state === 'not-reached').length, 0);
      const sync = (await bed.store.getSync(syncId))!;
      assert.equal(sync.status, 'running');
      assert.equal(sync.budget, 'core');
      assert.equal(sync.hibernatingUntil !== null, true);
    });
    // The changes stage (GraphQL) goes on while the checks wait for the core reset. When it is done
    // first, no stage can proceed and the sync hibernates until the reset; when it still works at the
    // reset, the checks go on in the same leg. Both keep the same guarantees.
    const drained = bed.sim.drained!;
    const resetLocal = drained.reset * 1000 - clockOffsetMs;
    const last = legs.outcomes[legs.outcomes.length - 1];
    assert.equal(last.kind, 'completed');
    if (last.kind !== 'completed') return;
    const first = legs.outcomes[0];
    if (legs.outcomes.length === 2) {
      assert.ok(first.kind === 'hibernate' && first.budget === 'core' && first.reason === 'primary', JSON.stringify(first));
      if (first.kind !== 'hibernate') return;
      // The wake-up is the server's reset on our clock: never before it, and not 10 minutes late either.
      assert.ok(first.until >= resetLocal, `wakes ${resetLocal - first.until} ms before the reset`);
      assert.ok(first.until <= resetLocal + 1500, `wakes ${first.until - resetLocal} ms after the reset`);
      assert.ok(savedExpected > 0, 'the limit fell where no jobs were stored yet; move drainAfter');
      assert.equal(last.summary.counters.requests_saved, savedExpected);
      assert.equal(last.summary.counters.hibernations, 1);
    } else {
      assert.equal(legs.outcomes.length, 1, JSON.stringify(legs.outcomes.map((o) => o.kind)));
      assert.equal(last.summary.counters.hibernations, 0);
    }
    // Never a core request answered before the reset once the window was drained.
    const coreAfter = bed.sim.served.filter((r) => r.resource === 'core' && r.at > drained.at && r.status === 200 && !r.limited);
    assert.ok(
      coreAfter.every((r) => r.at >= resetLocal - 5),
      `a core request answered ${resetLocal - Math.min(...coreAfter.map((r) => r.at))} ms before the reset`,
    );

    // Between the limit and the reset, on the core budget: only what was already in flight.
    const between = bed.sim.served.filter((r) => r.resource === 'core' && r.at > drained.at && r.at < resetLocal);
    assert.ok(between.length <= CONCURRENCY, `${between.length} core requests between the limit and the reset`);

    // Zero wasted: the same successful requests as a run without the limit, none of them twice.
    const answered = ok(bed);
    assert.equal(answered.length, reference.ok);
    assert.equal(new Set(answered.map((r) => `${r.method} ${r.path}`)).size, answered.length - graphqlRepeats(bed));
    assert.deepEqual(await storedCounts(bed.store), reference.rows);

    const c = last.summary.counters;
    assert.equal(c.requests_made, bed.sim.served.length);
    assert.equal(c.records_collected, reference.rows.pullRequests + reference.rows.runs + reference.rows.jobs);
    for (const stage of ['changes', 'checks'] as const) {
      assert.equal(last.summary.stages[stage].done, 8);
      assert.equal(last.summary.stages[stage].notReached, 0);
    }
  } finally {
    await bed.close();
  }
}

/** GraphQL requests share one path; they differ by body, which the log does not keep: count them apart. */
function graphqlRepeats(bed: GithubBed): number {
  const graphql = ok(bed).filter((r) => r.path === '/graphql').length;
  return graphql > 0 ? graphql - 1 : 0;
}

test(
  'a rate limit in the middle of the checks: hibernate, nothing between limit and reset but what was in flight, the resume completes with zero wasted',
  { timeout: 180_000 },
  async () => {
    await limitInTheChecks(0);
  },
);

test('the same with the server clock 10 minutes ahead of ours', { timeout: 180_000 }, async () => {
  await limitInTheChecks(10 * 60_000);
});

test('GraphQL RATE_LIMITED in the changes stage hibernates on the graphql budget; the resume completes', { timeout: 120_000 }, async () => {
  const bed = await githubBed(server.url, { ...base, drainAfter: { resource: 'graphql', requests: 10 } });
  try {
    const legs = await syncToTheEnd(bed);
    const first = legs.outcomes[0];
    assert.ok(first.kind === 'hibernate' && first.budget === 'graphql' && first.reason === 'graphql', JSON.stringify(first));
    if (first.kind !== 'hibernate') return;
    const last = legs.outcomes[legs.outcomes.length - 1];
    assert.equal(last.kind, 'completed');
    assert.deepEqual(await storedCounts(bed.store), { pullRequests: 8 * 12, runs: 8 * 7, jobs: 8 * 7 * 2 });
    // The stages side by side: the REST stage went on after the GraphQL limit and was done before the
    // leg hibernated; the wake-up had only GraphQL left to do.
    const core = bed.sim.served.filter((r) => r.resource === 'core');
    assert.ok(
      core.some((r) => r.at > bed.sim.drained!.at),
      'no REST request after the GraphQL limit',
    );
    assert.deepEqual(
      core.filter((r) => r.at >= first.until).map((r) => r.path),
      [],
    );
  } finally {
    await bed.close();
  }
});

test('the preventive pause: a tiny quota is used up to its last point without GitHub ever refusing', { timeout: 120_000 }, async () => {
  // An 8 s window: a loaded machine's sync must not outlast it, or a fresh window hides the pause.
  const bed = await githubBed(server.url, { ...base, repos: 4, windowSeconds: 8, limits: { core: 15, graphql: 20 } });
  try {
    const legs = await syncToTheEnd(bed);
    // 36 core requests, at most 14 a window (the pause keeps 2 x cost): at least three legs.
    assert.ok(legs.outcomes.length >= 3, `${legs.outcomes.length} legs`);
    assert.ok(legs.outcomes.slice(0, -1).every((o) => o.kind === 'hibernate' && o.reason === 'preventive'));
    assert.equal(bed.sim.served.filter((r) => r.limited).length, 0);
    assert.deepEqual(await storedCounts(bed.store), { pullRequests: 4 * 12, runs: 4 * 7, jobs: 4 * 7 * 2 });
  } finally {
    await bed.close();
  }
});

test(
  'a secondary limit without retry-after waits at least 60 s, then backs off exponentially; with retry-after, that long',
  { timeout: 120_000 },
  async () => {
    const bed = await githubBed(server.url, { ...base, secondaryFrom: { requests: 4, retryAfterSeconds: null } });
    try {
      const client = { baseUrl: bed.url, token: null, pageSize: 5 };
      const t0 = Date.now();
      const first = await runGithubSync({ store: bed.store, client, repos: bed.sim.repoNames });
      assert.ok(first.kind === 'hibernate' && first.reason === 'secondary', JSON.stringify(first));
      if (first.kind !== 'hibernate') return;
      assert.ok(first.until >= t0 + 60_000 && first.until < Date.now() + 61_000, `${first.until - t0}`);
      // The caller may wake it early (an operator); still limited, the next wait doubles.
      const t1 = Date.now();
      const second = await runGithubSync({ store: bed.store, client, resume: first.syncId });
      assert.ok(second.kind === 'hibernate' && second.until >= t1 + 120_000, JSON.stringify(second));
      const sync = (await bed.store.getSync(first.syncId))!;
      assert.equal(sync.hibernations, 2);
      assert.equal(sync.status, 'running');
    } finally {
      await bed.close();
    }
    const withRetry = await githubBed(server.url, { ...base, secondaryFrom: { requests: 4, retryAfterSeconds: 7 } });
    try {
      const t0 = Date.now();
      const o = await runGithubSync({
        store: withRetry.store,
        client: { baseUrl: withRetry.url, token: null },
        repos: withRetry.sim.repoNames,
      });
      assert.ok(o.kind === 'hibernate' && o.until >= t0 + 7_000 && o.until < Date.now() + 8_000, JSON.stringify(o));
    } finally {
      await withRetry.close();
    }
  },
);

test('the stuck-sync reconciler fails a running sync without progress, never a hibernating one', { timeout: 60_000 }, async () => {
  const bed = await githubBed(server.url, { repos: 1 });
  try {
    const stuck = await bed.store.createSync(['a/b']);
    const sleeping = await bed.store.createSync(['a/b']);
    const fresh = await bed.store.createSync(['a/b']);
    // A leg works on each (its agent says so); progress is measured only while one does.
    for (const id of [stuck, sleeping, fresh]) await bed.store.legBegins(id);
    await bed.store.hibernate(sleeping, Date.now() + 3_600_000, 'core', false);
    await bed.store.db.query('UPDATE github.sync SET progress_at = progress_at - 600000 WHERE id IN ($1, $2)', [stuck, sleeping]);
    assert.deepEqual(await bed.store.reconcileStuck(300_000), [stuck]);
    const rows = await Promise.all([stuck, sleeping, fresh].map((id) => bed.store.getSync(id)));
    assert.deepEqual(
      rows.map((r) => [r!.status, r!.reason]),
      [
        ['failed', 'stuck-no-progress'],
        ['running', null],
        ['running', null],
      ],
    );
  } finally {
    await bed.close();
  }
});
