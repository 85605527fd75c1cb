import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import type { GithubSyncStatus } from '../../agent/github/githubSyncStatus';
import type { RunInfo } from '../../shared/protocol';
import { GithubSimulator } from '../../simulator/github/githubSimulator';
import { listRuns, makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';
import { newDatabase } from '../support/githubTestBed';
import { startTestPostgres, type TestPostgres } from '../support/postgres';
import { waitFor } from '../support/waitFor';

// `quantilica github sync|status` as real processes, against the simulator: a sync is a run of the
// catalog's github-sync entry, in the agent when one runs, else as `quantilica run` does without one.
const TOKEN = 'ghp_cli_token_must_not_show_9876543210';
let server: TestPostgres;
before(async () => {
  server = await startTestPostgres();
});
after(async () => {
  await server?.stop();
});

const statusOf = (stdout: string) => (JSON.parse(stdout) as { sync: GithubSyncStatus | null }).sync;

/** A station whose catalog has the `github` sync entry (all the simulator's repositories). */
function syncStation(sim: GithubSimulator, url: string, extra: Record<string, string>): TestEnv {
  const t = makeTestEnv([{ name: 'other', pool: 'network-light', argv: ['true'] }], { QUANTILICA_GITHUB_API_URL: url, ...extra });
  const catalog = JSON.parse(fs.readFileSync(t.env.QUANTILICA_CATALOG!, 'utf8')) as { fetchers: object[] };
  catalog.fetchers.push({ name: 'github', kind: 'github-sync', pool: 'network-light', repos: sim.repoNames });
  fs.writeFileSync(t.env.QUANTILICA_CATALOG!, JSON.stringify(catalog));
  return t;
}

/** `quantilica runs --json --fetcher github`: the station's runs of its github entry. */
const runsOf = (t: TestEnv): Promise<RunInfo[]> => listRuns(t, ['--fetcher', 'github']);

test(
  'with an agent, github sync is a run of the entry in the agent: --repos overrides its list, --wait exits 0 once it completed; without --wait the agent carries it alone',
  { timeout: 180_000 },
  async () => {
    const sim = new GithubSimulator({
      repos: 5,
      pullRequestsPerRepo: 6,
      runsPerRepo: 6,
      jobsPerRun: 2,
      windowSeconds: 2,
      drainAfter: { resource: 'core', requests: 12 },
    });
    const url = await sim.start();
    const t = syncStation(sim, url, { QUANTILICA_DATABASE_URL: await newDatabase(server.url), GITHUB_TOKEN: TOKEN });
    const agent = await startAgent(t);
    try {
      const some = sim.repoNames.slice(0, 3);
      const run = await runCli(t, ['github', 'sync', '--repos', some.join(','), '--wait', '--json']);
      assert.equal(run.code, 0, run.stderr);
      assert.match(run.stderr, /queued in network-light/);
      const out = JSON.parse(run.stdout) as { run: RunInfo; sync: GithubSyncStatus };
      assert.equal(out.run.status, 'completed');
      assert.deepEqual(out.run.args, some);
      assert.equal(out.sync.status, 'completed');
      assert.equal(out.sync.counters.hibernations, 1);
      assert.deepEqual(
        [out.sync.stages.changes.total, out.sync.stages.checks.done],
        [3, 3],
        "the run synced its --repos, not the entry's 5",
      );
      // Without --wait: the command returns with the run queued; the agent alone takes it to its end.
      const detached = await runCli(t, ['github', 'sync', '--json']);
      assert.equal(detached.code, 0, detached.stderr);
      const queued = (JSON.parse(detached.stdout) as { run: RunInfo }).run;
      assert.deepEqual(queued.args, []);
      const done = await waitFor(async () => (await runsOf(t)).find((r) => r.runId === queued.runId && r.status === 'completed') ?? null, {
        what: 'the agent to complete the sync',
        timeoutMs: 120_000,
        intervalMs: 250,
      });
      assert.equal(done.exitCode, 0);
      const s = statusOf((await runCli(t, ['github', 'status', '--json'])).stdout)!;
      assert.equal(s.stages.checks.done, 5, "the entry's own list");
      assert.equal(s.counters.requests_made + out.sync.counters.requests_made, sim.served.length);
      for (const text of [run.stdout, run.stderr, detached.stdout]) assert.ok(!text.includes(TOKEN));
    } finally {
      agent.child.kill('SIGTERM');
      await new Promise((resolve) => agent.child.once('exit', resolve));
      await sim.stop();
    }
  },
);

test(
  'without an agent, github sync --wait runs it in this process: hibernates on a limit, wakes itself, completes: exit 0; status --json tells it all, without the token',
  { timeout: 180_000 },
  async () => {
    const sim = new GithubSimulator({
      repos: 5,
      pullRequestsPerRepo: 6,
      runsPerRepo: 6,
      jobsPerRun: 2,
      windowSeconds: 2,
      drainAfter: { resource: 'core', requests: 12 },
    });
    const url = await sim.start();
    try {
      const t = syncStation(sim, url, { QUANTILICA_DATABASE_URL: await newDatabase(server.url), GITHUB_TOKEN: TOKEN });
      const run = await runCli(t, ['github', 'sync', '--repos', sim.repoNames.join(','), '--wait']);
      assert.equal(run.code, 0, run.stderr);
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
  },
);

test(
  'without an agent and without --wait a detached owner holds the sync through its hibernation; a second sync follows it, --repos is refused (81), cancel ends it',
  { timeout: 120_000 },
  async () => {
    // GraphQL only: a secondary limit is the token's, so the REST stage stops on it too, and the sync
    // hibernates on the graphql budget, the one that met it.
    const sim = new GithubSimulator({ repos: 3, secondaryFrom: { requests: 3, retryAfterSeconds: 600, resource: 'graphql' } });
    const url = await sim.start();
    try {
      const t = syncStation(sim, url, { QUANTILICA_DATABASE_URL: await newDatabase(server.url) });
      const run = await runCli(t, ['github', 'sync', '--json']);
      assert.equal(run.code, 0, run.stderr);
      const { runId } = (JSON.parse(run.stdout) as { run: RunInfo }).run;
      const s = await waitFor(
        async () => {
          const sync = statusOf((await runCli(t, ['github', 'status', '--json'])).stdout);
          return sync?.hibernatingUntil ? sync : null;
        },
        { what: 'the sync to hibernate', timeoutMs: 60_000, intervalMs: 250 },
      );
      assert.equal(s.status, 'running');
      assert.equal(s.budget, 'graphql');
      assert.ok(Date.parse(s.hibernatingUntil!) > Date.now() + 500_000);
      assert.match((await runCli(t, ['github', 'status'])).stdout, /hibernating until .*, graphql budget/);
      const again = await runCli(t, ['github', 'sync']);
      assert.equal(again.code, 0, again.stderr);
      assert.match(again.stdout, new RegExp(`run ${runId} github hibernating until`));
      const other = await runCli(t, ['github', 'sync', '--repos', 'sim-org/repo-001']);
      assert.equal(other.code, 81);
      assert.match(other.stderr, /already hibernating/);
      const cancel = await runCli(t, ['cancel', runId]);
      assert.equal(cancel.code, 0, cancel.stderr);
      const ended = await waitFor(async () => (await runsOf(t)).find((r) => r.runId === runId && r.status === 'cancelled') ?? null, {
        what: 'the run to end cancelled',
        timeoutMs: 60_000,
        intervalMs: 250,
      });
      assert.equal(ended.reason, 'cancelled');
      assert.equal(statusOf((await runCli(t, ['github', 'status', '--json'])).stdout)?.status, 'cancelled');
    } finally {
      await sim.stop();
    }
  },
);

test(
  'without a database URL the sync lives in a private SQLite file; repositories not reached give exit 82',
  { timeout: 120_000 },
  async () => {
    const sim = new GithubSimulator({ repos: 3, faults: { 'sim-org/repo-002': { kind: 'server-error', stage: 'checks' } } });
    const url = await sim.start();
    try {
      const t = syncStation(sim, url, { QUANTILICA_HOME: path.join(makeTestEnv(null).home, 'qh') });
      const file = path.join(t.env.QUANTILICA_HOME!, 'github_sync.db');
      const reposFile = path.join(t.root, 'repos.txt');
      fs.writeFileSync(reposFile, `# the simulator's\n${sim.repoNames.join('\n')}\n`);
      const run = await runCli(t, ['github', 'sync', '--repos-file', reposFile, '--wait', '--json']);
      assert.equal(run.code, 82, run.stderr);
      const s = statusOf(run.stdout)!;
      assert.deepEqual(s.stages.checks.notReachedRepos, [{ repo: 'sim-org/repo-002', reason: 'server-error' }]);
      assert.equal(s.stages.changes.done, 3);
      assert.equal(fs.statSync(file).mode & 0o777, 0o600);
      // `quantilica run` of the entry tells the same: 82.
      assert.equal((await runCli(t, ['run', 'github'])).code, 82);
    } finally {
      await sim.stop();
    }
  },
);

test(
  'github sync --full loads every repository in full again: the same requests as the first sync, none conditional',
  { timeout: 120_000 },
  async () => {
    const sim = new GithubSimulator({ repos: 2, pullRequestsPerRepo: 12, runsPerRepo: 8, jobsPerRun: 1 });
    const url = await sim.start();
    try {
      const t = syncStation(sim, url, { QUANTILICA_HOME: path.join(makeTestEnv(null).home, 'qh') });
      const asked = async (args: string[]) => {
        const from = sim.served.length;
        const r = await runCli(t, ['github', 'sync', ...args, '--wait', '--json']);
        assert.equal(r.code, 0, r.stderr);
        return { stderr: r.stderr, served: sim.served.slice(from) };
      };
      const first = await asked([]);
      const again = await asked([]);
      assert.ok(again.served.length < first.served.length, `${again.served.length} requests again of ${first.served.length}`);
      assert.ok(
        again.served.some((r) => r.status === 304),
        'the second sync sent no conditional request',
      );
      const full = await asked(['--full']);
      assert.match(full.stderr, /--full: every repository loaded in full again/);
      assert.deepEqual(full.served.map((r) => r.path).sort(), first.served.map((r) => r.path).sort());
      assert.equal(full.served.filter((r) => r.status === 304).length, 0);
    } finally {
      await sim.stop();
    }
  },
);

test(
  'bad repositories are refused with a clear error and exit 64, an unknown entry with 65; no sync is created',
  { timeout: 60_000 },
  async () => {
    const sim = new GithubSimulator({ repos: 2 });
    const t = syncStation(sim, 'http://127.0.0.1:9', { QUANTILICA_DATABASE_URL: await newDatabase(server.url) });
    const bad = await runCli(t, ['github', 'sync', '--repos', 'ok/fine,not a repo,../x']);
    assert.equal(bad.code, 64);
    assert.match(bad.stderr, /not a repository \(owner\/name\): "not a repo", "\.\.\/x"/);
    const both = await runCli(t, ['github', 'sync', '--repos', 'a/b', '--repos-file', '/nonexistent']);
    assert.equal(both.code, 64);
    assert.match(both.stderr, /give --repos or --repos-file, not both/);
    const unknown = await runCli(t, ['github', 'sync', '--entry', 'other']);
    assert.equal(unknown.code, 65);
    assert.match(unknown.stderr, /other is not a github-sync entry of the catalog; those are: github/);
    // The same check in the agent's run request: a fetcher's argument that is not owner/name.
    const direct = await runCli(t, ['run', 'github', '--', '--not-a-repo']);
    assert.equal(direct.code, 64);
    assert.match(direct.stderr, /not a repository \(owner\/name\): "--not-a-repo"/);
    assert.equal(statusOf((await runCli(t, ['github', 'status', '--json'])).stdout), null);
    assert.deepEqual(await runsOf(t), []);
  },
);

test(
  'no catalog: with QUANTILICA_GITHUB_API_URL set, github sync --repos uses that API, not the demo simulator, and its first line says so',
  { timeout: 180_000 },
  async () => {
    const sim = new GithubSimulator({ repos: ['acme/a'], pullRequestsPerRepo: 3, runsPerRepo: 2, jobsPerRun: 1 });
    const url = await sim.start();
    const t = makeTestEnv([], {
      QUANTILICA_GITHUB_API_URL: url,
      GITHUB_TOKEN: TOKEN,
      QUANTILICA_DATABASE_URL: await newDatabase(server.url),
    });
    delete t.env.QUANTILICA_CATALOG;
    try {
      const run = await runCli(t, ['github', 'sync', '--repos', 'acme/a', '--wait', '--json']);
      assert.equal(run.code, 0, run.stderr);
      // The first line of the sync's own (log records of the CLI's config, JSON, aside).
      assert.equal(run.stderr.split('\n').filter((l) => !l.startsWith('{'))[0], `github sync: entry github against ${url}`);
      const out = JSON.parse(run.stdout) as { sync: GithubSyncStatus };
      assert.deepEqual([out.sync.stages.changes.done, out.sync.stages.checks.done, out.sync.stages.changes.notReached], [1, 1, 0]);
      assert.ok(
        sim.served.some((r) => r.repo === 'acme/a'),
        'the configured API got no request',
      );
    } finally {
      await sim.stop();
    }
  },
);
