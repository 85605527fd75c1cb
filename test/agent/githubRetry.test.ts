import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MIN_GRAPHQL_PAGE } from '../../agent/github/graphqlPageTooLarge';
import { REQUEST_TRIES } from '../../agent/github/requestRetry';
import { runGithubSync } from '../../agent/github/runGithubSync';
import { engineBeds, GITHUB_ENGINES, simulatedRepo, storedRepo } from '../support/githubTestBed';

// One bad answer does not cost a repository its stage: a dropped connection and a 5xx are tried again
// per request, and a GraphQL page that takes too long (a 502) is asked again at half the size. On both
// engines, against the simulator's faults that pass.

const ENGINES = GITHUB_ENGINES;
const bedOn = engineBeds();

const PAGE = 40;
const MAX_FIRST = MIN_GRAPHQL_PAGE;

for (const engine of ENGINES) {
  test(
    `${engine}: a dropped connection, a 502 and a GraphQL page that takes too long are retried, and every repository completes`,
    { timeout: 180_000 },
    async () => {
      const bed = await bedOn(engine, {
        repos: 4,
        pullRequestsPerRepo: 25,
        runsPerRepo: 6,
        jobsPerRun: 2,
        graphqlMaxFirst: MAX_FIRST,
        faults: {
          'sim-org/repo-001': { kind: 'drop-once', stage: 'checks' },
          'sim-org/repo-002': { kind: 'server-error-once', stage: 'checks' },
          'sim-org/repo-003': { kind: 'drop-once', stage: 'changes' },
        },
      });
      try {
        const outcome = await runGithubSync({
          store: bed.store,
          client: { baseUrl: bed.url, token: null, pageSize: PAGE, retryBaseMs: 20 },
          repos: bed.sim.repoNames,
          taskTimeoutMs: 60_000,
        });
        assert.equal(outcome.kind, 'completed', JSON.stringify(outcome));
        if (outcome.kind !== 'completed') return;
        const { changes, checks } = outcome.summary.stages;
        assert.deepEqual([changes.notReachedRepos, checks.notReachedRepos], [[], []]);
        assert.deepEqual([changes.done, checks.done], [4, 4]);
        for (const repo of bed.sim.repoNames) assert.deepEqual(await storedRepo(bed.store, repo), simulatedRepo(bed.sim, repo), repo);

        const served = bed.sim.served;
        const failedTries = (repo: string, status: number) => served.filter((r) => r.repo === repo && r.status === status);
        // Each faulty REST page failed once and was answered on its next try.
        for (const [repo, status] of [
          ['sim-org/repo-001', 0],
          ['sim-org/repo-002', 502],
        ] as const) {
          const failed = failedTries(repo, status).filter((r) => r.resource === 'core');
          assert.ok(failed.length > 0, `${repo}: no ${status} served`);
          for (const f of failed)
            assert.ok(
              served.some((r) => r.path === f.path && r.at >= f.at && r.status === 200),
              `${repo} ${f.path}: never answered after its ${status}`,
            );
        }
        // A GraphQL page above the size that answers is halved down to it: two 502s per repository, no more.
        for (const repo of bed.sim.repoNames) {
          const tooLarge = served.filter((r) => r.repo === repo && r.resource === 'graphql' && r.status === 502);
          assert.equal(tooLarge.length, Math.ceil(Math.log2(PAGE / MAX_FIRST)), `${repo}: ${tooLarge.length} GraphQL 502s`);
        }
        assert.ok(
          failedTries('sim-org/repo-003', 0).some((r) => r.resource === 'graphql'),
          'no GraphQL connection dropped',
        );
        // Every try was a request made and counted; none was tried more often than REQUEST_TRIES.
        assert.equal(outcome.summary.counters.requests_made, served.length);
        const tries = new Map<string, number>();
        for (const r of served.filter((x) => x.resource === 'core')) tries.set(r.path, (tries.get(r.path) ?? 0) + 1);
        assert.ok(Math.max(...tries.values()) <= REQUEST_TRIES, `a page asked ${Math.max(...tries.values())} times`);
      } finally {
        await bed.close();
      }
    },
  );
}
