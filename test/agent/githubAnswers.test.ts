import assert from 'node:assert/strict';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { MAX_RATE_LIMIT_WAIT_MS } from '../../agent/github/budgetTracker';
import { runGithubSync, type GithubSyncOutcome } from '../../agent/github/runGithubSync';
import type { SimulatorOptions } from '../../simulator/github/githubSimulator';
import { githubBed, type GithubBed } from '../support/githubTestBed';
import { memoryLogger } from '../support/memoryLogger';
import { startTestPostgres, type TestPostgres } from '../support/postgres';

// What the sync does with answers it must not trust: foreign and looping Link next URLs, a refused
// token, a 403 that is not a limit, truncated and huge bodies, and rate limits that GitHub words in
// other ways or that claim a reset far ahead. Against the simulator, on a real PostgreSQL.

const TOKEN = 'ghp_answers_token_never_elsewhere_0123';
let server: TestPostgres;
before(async () => {
  server = await startTestPostgres();
});
after(async () => {
  await server?.stop();
});

const shape = { repos: 3, pullRequestsPerRepo: 6, runsPerRepo: 7, jobsPerRun: 2 };

async function withBed(options: Partial<SimulatorOptions>, fn: (bed: GithubBed) => Promise<void>): Promise<void> {
  const bed = await githubBed(server.url, { ...shape, ...options });
  try {
    await fn(bed);
  } finally {
    await bed.close();
  }
}

function sync(bed: GithubBed, extra: { token?: string | null; logger?: ReturnType<typeof memoryLogger> } = {}): Promise<GithubSyncOutcome> {
  return runGithubSync({
    store: bed.store,
    client: { baseUrl: bed.url, token: extra.token === undefined ? TOKEN : extra.token, pageSize: 5 },
    repos: bed.sim.repoNames,
    taskTimeoutMs: 60_000,
    logger: extra.logger,
  });
}

function notReached(outcome: GithubSyncOutcome, stage: 'changes' | 'checks'): Array<{ repo: string; reason: string }> {
  assert.equal(outcome.kind, 'completed');
  return outcome.kind === 'completed' ? outcome.summary.stages[stage].notReachedRepos : [];
}

test('a Link next on another origin is never requested (with the token or at all) and never stored', { timeout: 120_000 }, async () => {
  const seen: Array<{ url: string; authorization: string | undefined }> = [];
  const other = http.createServer((req, res) => {
    seen.push({ url: req.url ?? '', authorization: req.headers.authorization });
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"total_count":0,"workflow_runs":[]}');
  });
  await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
  const foreignOrigin = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
  try {
    await withBed({ runsNext: { foreignOrigin } }, async (bed) => {
      const outcome = await sync(bed);
      assert.deepEqual(
        notReached(outcome, 'checks'),
        bed.sim.repoNames.map((repo) => ({ repo, reason: 'malformed-answer' })),
      );
      assert.equal(notReached(outcome, 'changes').length, 0);
      assert.deepEqual(seen, [], 'the other origin got a request');
      const cursors = await bed.store.db.query<{ cursor: string | null }>('SELECT cursor FROM github.checkpoint');
      for (const { cursor } of cursors) assert.ok(cursor === null || !cursor.includes(foreignOrigin), `stored cursor ${cursor}`);
      // Every runs request went to the simulator: one first page per repository, none further.
      assert.equal(bed.sim.served.filter((r) => /\/actions\/runs(\?|$)/.test(r.path)).length, bed.sim.repoNames.length);
    });
  } finally {
    other.closeAllConnections();
    await new Promise<void>((resolve) => other.close(() => resolve()));
  }
});

test('a Link next pointing back at a page already followed is a malformed answer, not a loop', { timeout: 120_000 }, async () => {
  await withBed({ runsNext: 'self' }, async (bed) => {
    const outcome = await sync(bed);
    assert.deepEqual(
      notReached(outcome, 'checks'),
      bed.sim.repoNames.map((repo) => ({ repo, reason: 'malformed-answer' })),
    );
    for (const repo of bed.sim.repoNames) {
      const runs = bed.sim.served.filter((r) => r.repo === repo && /\/actions\/runs(\?|$)/.test(r.path)).length;
      assert.ok(runs <= 2, `${repo}: ${runs} requests of its runs listing`);
    }
  });
});

test('a 401 fails the sync at once as unauthorized: one request, no other repository tried', { timeout: 120_000 }, async () => {
  await withBed({ token: TOKEN }, async (bed) => {
    const outcome = await sync(bed, { token: 'ghp_wrong_token_000000000000000000000' });
    assert.deepEqual(outcome.kind === 'failed' ? outcome.reason : outcome.kind, 'unauthorized');
    assert.equal(bed.sim.served.length, 1);
    const row = (await bed.store.latestSync())!;
    assert.deepEqual([row.status, row.reason], ['failed', 'unauthorized']);
    assert.equal((await bed.store.checkpoints(row.id)).filter((c) => c.state === 'not-reached').length, 0);
  });
  // The right token: the same simulator answers, the sync completes.
  await withBed({ token: TOKEN }, async (bed) => {
    assert.equal((await sync(bed)).kind, 'completed');
  });
});

test(
  'a 403 that is not a rate limit stays forbidden for that repository; truncated JSON is malformed-answer',
  { timeout: 120_000 },
  async () => {
    await withBed(
      {
        faults: {
          'sim-org/repo-001': { kind: 'forbidden', stage: 'checks' },
          'sim-org/repo-002': { kind: 'truncated', stage: 'checks' },
          'sim-org/repo-003': { kind: 'truncated', stage: 'changes' },
        },
      },
      async (bed) => {
        const outcome = await sync(bed);
        assert.deepEqual(notReached(outcome, 'checks'), [
          { repo: 'sim-org/repo-001', reason: 'forbidden' },
          { repo: 'sim-org/repo-002', reason: 'malformed-answer' },
        ]);
        assert.deepEqual(notReached(outcome, 'changes'), [{ repo: 'sim-org/repo-003', reason: 'malformed-answer' }]);
      },
    );
  },
);

test('an endless answer body is cut at the cap and is a malformed answer; the others complete', { timeout: 120_000 }, async () => {
  await withBed({ faults: { 'sim-org/repo-002': { kind: 'huge', stage: 'checks' } } }, async (bed) => {
    const before = process.memoryUsage().rss;
    const outcome = await sync(bed);
    assert.deepEqual(notReached(outcome, 'checks'), [{ repo: 'sim-org/repo-002', reason: 'malformed-answer' }]);
    assert.ok(process.memoryUsage().rss - before < 400 * 1024 * 1024, 'the body was held beyond the cap');
    if (outcome.kind === 'completed') assert.equal(outcome.summary.stages.checks.done, 2);
  });
});

test('GraphQL RATE_LIMIT hibernates like RATE_LIMITED', { timeout: 120_000 }, async () => {
  await withBed({ graphqlLimitType: 'RATE_LIMIT', drainAfter: { resource: 'graphql', requests: 2 } }, async (bed) => {
    const outcome = await sync(bed);
    assert.equal(outcome.kind, 'hibernate');
    if (outcome.kind === 'hibernate') assert.deepEqual([outcome.budget, outcome.reason], ['graphql', 'graphql']);
  });
});

test('a secondary limit with remaining 0 and no retry-after waits for x-ratelimit-reset', { timeout: 120_000 }, async () => {
  await withBed({ secondaryFrom: { requests: 3, retryAfterSeconds: null, remainingZero: true }, resetAheadSeconds: 1800 }, async (bed) => {
    const started = Date.now();
    const outcome = await sync(bed);
    assert.equal(outcome.kind, 'hibernate');
    if (outcome.kind !== 'hibernate') return;
    assert.equal(outcome.reason, 'secondary');
    assert.ok(outcome.until >= started + 1795_000 && outcome.until <= Date.now() + 1801_000, `until ${outcome.until - started} ms ahead`);
  });
});

for (const [what, options] of [
  ['a reset 30 days ahead', { drainAfter: { resource: 'core', requests: 4 }, resetAheadSeconds: 30 * 86_400 }],
  ['a retry-after 30 days ahead', { secondaryFrom: { requests: 4, retryAfterSeconds: 30 * 86_400 } }],
] as Array<[string, Partial<SimulatorOptions>]>) {
  test(`${what} is malformed (logged): the sync hibernates at most an hour and a margin, no loop`, { timeout: 120_000 }, async () => {
    await withBed(options, async (bed) => {
      const logger = memoryLogger();
      const started = Date.now();
      const outcome = await sync(bed, { logger });
      assert.equal(outcome.kind, 'hibernate');
      if (outcome.kind !== 'hibernate') return;
      assert.ok(outcome.until <= Date.now() + MAX_RATE_LIMIT_WAIT_MS, `until ${outcome.until - started} ms ahead`);
      assert.ok(outcome.until >= started + 60 * 60_000, `until ${outcome.until - started} ms ahead`);
      assert.ok(
        logger.records.some((r) => r.level === 'warn' && /beyond the next hour/.test(r.msg ?? '')),
        'not logged',
      );
      // One limited answer per task in flight at most; nothing retried in a loop.
      assert.ok(bed.sim.served.filter((r) => r.limited).length <= 5, `${bed.sim.served.filter((r) => r.limited).length} limited answers`);
    });
  });
}
