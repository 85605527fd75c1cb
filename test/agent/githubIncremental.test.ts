import assert from 'node:assert/strict';
import { test } from 'node:test';
import { workflowRunSchema } from '../../agent/github/records';
import { runGithubSync, type GithubSyncOutcome } from '../../agent/github/runGithubSync';
import { engineBeds, GITHUB_ENGINES, simulatedRepo, storedRepo, type GithubBed } from '../support/githubTestBed';

// The sync as a daily collector, on both engines: a first (full) sync, a simulated day of changes, a
// second (incremental) sync whose result equals the simulator's data; unchanged data costs almost
// nothing; a repository not reached continues from its cursor.

const ENGINES = GITHUB_ENGINES;
const bedOn = engineBeds();

async function sync(
  bed: GithubBed,
  pageSize: number,
  extra: { taskTimeoutMs?: number } = {},
): Promise<Extract<GithubSyncOutcome, { kind: 'completed' }>> {
  const outcome = await runGithubSync({
    store: bed.store,
    client: { baseUrl: bed.url, token: null, pageSize },
    repos: bed.sim.repoNames,
    ...extra,
  });
  assert.equal(outcome.kind, 'completed', JSON.stringify(outcome));
  return outcome;
}

async function assertStoredEqualsSimulator(bed: GithubBed): Promise<void> {
  for (const repo of bed.sim.repoNames) assert.deepEqual(await storedRepo(bed.store, repo), simulatedRepo(bed.sim, repo), repo);
}

for (const engine of ENGINES) {
  test(
    `${engine}: after a simulated day the second sync stores exactly the simulator's pull requests, runs and every attempt's jobs`,
    { timeout: 180_000 },
    async () => {
      const bed = await bedOn(engine, { repos: 3, pullRequestsPerRepo: 12, runsPerRepo: 9, jobsPerRun: 2 });
      try {
        await sync(bed, 5);
        await assertStoredEqualsSimulator(bed);
        bed.sim.advanceDay();
        // The day did what it should: a re-run as attempt 2, a merge, a run still in progress.
        const day = bed.sim.data(bed.sim.repoNames[0])!;
        assert.ok(day.runs.some((r) => r.run_attempt === 2));
        assert.ok(day.runs.some((r) => r.status === 'in_progress'));
        const before = bed.sim.served.length;
        const second = await sync(bed, 5);
        await assertStoredEqualsSimulator(bed);
        const asked = bed.sim.served.slice(before);
        // Incremental: the runs are listed with a created filter, the pull requests stop early (12 + 1 in pages of 5: not all 3).
        assert.ok(asked.filter((r) => r.path.includes('/actions/runs?')).every((r) => /[?&]created=/.test(r.path)));
        assert.ok(asked.filter((r) => r.resource === 'graphql').length < 3 * 3);
        assert.ok(asked.filter((r) => r.path.includes('/jobs')).every((r) => r.path.includes('filter=all')));
        assert.equal(second.summary.counters.requests_made, asked.length);

        // Forty days later, with a run left in progress: it falls out of the listing's window, so it is read by id.
        bed.sim.advanceDay(40, { completeRuns: false });
        await sync(bed, 5);
        await assertStoredEqualsSimulator(bed);
        bed.sim.advanceDay(1);
        const mark = bed.sim.served.length;
        await sync(bed, 5);
        await assertStoredEqualsSimulator(bed);
        assert.ok(
          bed.sim.served.slice(mark).some((r) => /\/actions\/runs\/\d+$/.test(r.path)),
          'no run read again by id',
        );
      } finally {
        await bed.close();
      }
    },
  );

  test(
    `${engine}: a sync of unchanged data costs at most 3 counted requests per repository and at most 2 % of the first`,
    { timeout: 180_000 },
    async () => {
      const bed = await bedOn(engine, { repos: 3, pullRequestsPerRepo: 12, runsPerRepo: 200, jobsPerRun: 1 });
      try {
        const first = await sync(bed, 20);
        bed.sim.advanceDay();
        await sync(bed, 20);
        const before = bed.sim.served.length;
        const unchanged = await sync(bed, 20);
        const c = unchanged.summary.counters;
        const asked = bed.sim.served.slice(before);
        assert.equal(c.requests_made, asked.length);
        assert.equal(c.requests_not_modified, asked.filter((r) => r.status === 304).length);
        assert.ok(c.requests_not_modified > 0, 'no conditional request answered 304');
        const counted = c.requests_made - c.requests_not_modified;
        assert.ok(
          counted <= 3 * 3,
          `${counted} counted requests for 3 repositories: ${asked
            .filter((r) => r.status !== 304)
            .map((r) => r.path)
            .join(' ')}`,
        );
        assert.ok(
          counted <= 0.02 * first.summary.counters.requests_made,
          `${counted} of ${first.summary.counters.requests_made}: ${asked
            .filter((r) => r.status !== 304)
            .map((r) => r.path)
            .join(' ')}`,
        );
        // The jobs of every run were fresh or unchanged: none asked again at a cost.
        assert.deepEqual(
          asked.filter((r) => r.path.includes('/jobs') && r.status !== 304).map((r) => r.path),
          [],
        );
        await assertStoredEqualsSimulator(bed);
      } finally {
        await bed.close();
      }
    },
  );

  test(
    `${engine}: a repository not reached keeps its cursor: the next sync asks for none of its stored pages`,
    { timeout: 180_000 },
    async () => {
      const slow = 'sim-org/repo-001';
      const bed = await bedOn(engine, {
        repos: 2,
        pullRequestsPerRepo: 6,
        runsPerRepo: 30,
        jobsPerRun: 1,
        faults: { [slow]: { kind: 'slow', stage: 'checks', fromPage: 3 } },
        slowMs: 20_000,
      });
      try {
        const first = await sync(bed, 5, { taskTimeoutMs: 4_000 });
        assert.deepEqual(first.summary.stages.checks.notReachedRepos, [{ repo: slow, reason: 'timeout' }]);
        const stored = bed.sim.served
          .filter((r) => r.repo === slow && r.path.includes('/actions/runs?') && r.status === 200)
          .map((r) => r.path);
        assert.equal(stored.length, 2);
        bed.sim.setFaults({});
        const before = bed.sim.served.length;
        await sync(bed, 5);
        const listed = bed.sim.served
          .slice(before)
          .filter((r) => r.repo === slow && r.path.includes('/actions/runs?'))
          .map((r) => r.path);
        assert.ok(listed.length > 0);
        for (const path of stored) assert.ok(!listed.includes(path), `${path} asked again`);
        assert.ok(!listed.some((p) => /[?&]page=[12](&|$)/.test(p) || !/[?&]page=/.test(p)), listed.join('\n'));
        await assertStoredEqualsSimulator(bed);
      } finally {
        await bed.close();
      }
    },
  );
}

for (const engine of ENGINES) {
  test(`${engine}: an upsert never replaces a row with an older updated_at`, { timeout: 60_000 }, async () => {
    const bed = await bedOn(engine, { repos: 1 });
    try {
      const syncId = await bed.store.createSync(['a/b']);
      const run = (updatedAt: string, status: string) =>
        workflowRunSchema.parse({
          id: 77,
          name: 'ci',
          status,
          conclusion: status === 'completed' ? 'success' : null,
          created_at: '2026-01-01T00:00:00Z',
          updated_at: updatedAt,
          run_attempt: 1,
          event: 'push',
          head_sha: 'abc',
          head_branch: 'main',
          run_started_at: '2026-01-01T00:00:01Z',
          actor: { login: 'someone' },
          pull_requests: [],
        });
      const stored = async () =>
        (
          await bed.store.db.query<{ status: string; updated_at: string }>(
            'SELECT status, updated_at FROM github.workflow_run WHERE id = 77',
          )
        )[0];
      await bed.store.upsertWorkflowRuns(syncId, 'a/b', [run('2026-01-02T00:00:00Z', 'completed')], null);
      // A page read before the run completed, written after: the newer row stays.
      await bed.store.upsertWorkflowRuns(syncId, 'a/b', [run('2026-01-01T12:00:00Z', 'in_progress')], null);
      assert.deepEqual({ ...(await stored()) }, { status: 'completed', updated_at: '2026-01-02T00:00:00Z' });
      await bed.store.upsertWorkflowRuns(syncId, 'a/b', [run('2026-01-03T00:00:00Z', 'in_progress')], null);
      assert.deepEqual({ ...(await stored()) }, { status: 'in_progress', updated_at: '2026-01-03T00:00:00Z' });
    } finally {
      await bed.close();
    }
  });
}
