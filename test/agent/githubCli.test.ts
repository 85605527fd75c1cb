import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import type { GithubSyncStatus } from '../../agent/github/githubSyncStatus';
import { GithubSimulator } from '../../simulator/github/githubSimulator';
import { makeTestEnv, runCli } from '../support/harness';
import { newDatabase } from '../support/githubTestBed';
import { startTestPostgres, type TestPostgres } from '../support/postgres';

// `quantilica github sync|status` as real processes, against the simulator.
const TOKEN = 'ghp_cli_token_must_not_show_9876543210';
let server: TestPostgres;
before(async () => { server = await startTestPostgres(); });
after(async () => { await server?.stop(); });

const statusOf = (stdout: string) => (JSON.parse(stdout) as { sync: GithubSyncStatus | null }).sync;

test('github sync --wait hibernates on a limit, wakes itself, completes: exit 0; status --json tells it all, without the token', { timeout: 180_000 }, async () => {
  const sim = new GithubSimulator({ repos: 5, pullRequestsPerRepo: 6, runsPerRepo: 6, jobsPerRun: 2, windowSeconds: 2, drainAfter: { resource: 'core', requests: 12 } });
  const url = await sim.start();
  try {
    const t = makeTestEnv(null, { QUANTILICA_GITHUB_API_URL: url, QUANTILICA_DATABASE_URL: await newDatabase(server.url), GITHUB_TOKEN: TOKEN });
    const run = await runCli(t, ['github', 'sync', '--repos', sim.repoNames.join(','), '--wait']);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stderr, /hibernating until .* \(core budget, primary\)/);
    assert.match(run.stdout, /completed/);
    const status = await runCli(t, ['github', 'status', '--json']);
    assert.equal(status.code, 0, status.stderr);
    const s = statusOf(status.stdout)!;
    assert.equal(s.status, 'completed');
    assert.equal(s.counters.hibernations, 1);
    assert.equal(s.counters.requests_made, sim.served.length);
    assert.deepEqual([s.stages.changes.done, s.stages.checks.done, s.stages.checks.total], [5, 5, 5]);
    assert.equal(s.quota.core?.limit, 5000);
    const text = await runCli(t, ['github', 'status']);
    assert.match(text.stdout, /checks\s+5\/5 done, 0 not reached/);
    for (const out of [run.stdout, run.stderr, status.stdout, text.stdout]) assert.ok(!out.includes(TOKEN));
  } finally {
    await sim.stop();
  }
});

test('without --wait a hibernating sync is left running with its wake-up time; status shows when and on which budget', { timeout: 120_000 }, async () => {
  const sim = new GithubSimulator({ repos: 3, secondaryFrom: { requests: 3, retryAfterSeconds: 600 } });
  const url = await sim.start();
  try {
    const t = makeTestEnv(null, { QUANTILICA_GITHUB_API_URL: url, QUANTILICA_DATABASE_URL: await newDatabase(server.url) });
    const run = await runCli(t, ['github', 'sync', '--repos', sim.repoNames.join(',')]);
    assert.equal(run.code, 0, run.stderr);
    const s = statusOf((await runCli(t, ['github', 'status', '--json'])).stdout)!;
    assert.equal(s.status, 'running');
    assert.equal(s.budget, 'graphql');
    assert.ok(Date.parse(s.hibernatingUntil!) > Date.now() + 500_000);
    const text = await runCli(t, ['github', 'status']);
    assert.match(text.stdout, /hibernating until .*, graphql budget/);
    // A second `github sync` before the wake-up time resumes nothing and says so.
    const again = await runCli(t, ['github', 'sync']);
    assert.equal(again.code, 0);
    assert.match(again.stdout, /hibernating until/);
  } finally {
    await sim.stop();
  }
});

test('without a database URL the sync lives in a private SQLite file; repositories not reached give exit 82', { timeout: 120_000 }, async () => {
  const sim = new GithubSimulator({ repos: 3, faults: { 'sim-org/repo-002': { kind: 'server-error', stage: 'checks' } } });
  const url = await sim.start();
  try {
    const t = makeTestEnv(null, { QUANTILICA_GITHUB_API_URL: url, QUANTILICA_HOME: path.join(makeTestEnv(null).home, 'qh') });
    const file = path.join(t.env.QUANTILICA_HOME!, 'github_sync.db');
    const reposFile = path.join(t.root, 'repos.txt');
    fs.writeFileSync(reposFile, `# the simulator's\n${sim.repoNames.join('\n')}\n`);
    const run = await runCli(t, ['github', 'sync', '--repos-file', reposFile, '--wait', '--json']);
    assert.equal(run.code, 82, run.stderr);
    const s = statusOf(run.stdout)!;
    assert.deepEqual(s.stages.checks.notReachedRepos, [{ repo: 'sim-org/repo-002', reason: 'server-error' }]);
    assert.equal(s.stages.changes.done, 3);
    assert.equal(fs.statSync(file).mode & 0o777, 0o600);
  } finally {
    await sim.stop();
  }
});

test('bad repositories are refused with a clear error and exit 64; no sync is created', { timeout: 60_000 }, async () => {
  const t = makeTestEnv(null, { QUANTILICA_GITHUB_API_URL: 'http://127.0.0.1:9', QUANTILICA_DATABASE_URL: await newDatabase(server.url) });
  const bad = await runCli(t, ['github', 'sync', '--repos', 'ok/fine,not a repo,../x']);
  assert.equal(bad.code, 64);
  assert.match(bad.stderr, /not a repository \(owner\/name\): "not a repo", "\.\.\/x"/);
  const none = await runCli(t, ['github', 'sync']);
  assert.equal(none.code, 64);
  assert.match(none.stderr, /give --repos or --repos-file/);
  assert.equal(statusOf((await runCli(t, ['github', 'status', '--json'])).stdout), null);
});
