import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import type { RunInfo } from '../../shared/protocol';
import { GITHUB_STUCK_AFTER_MS } from '../../agent/github/githubRuns';
import { GithubStore, SyncActiveError } from '../../agent/github/store/githubStore';
import type { GithubDb } from '../../agent/github/store/githubDb';
import { migrateGithub } from '../../agent/github/store/migrateGithub';
import { GITHUB_SQLITE_FILE } from '../../agent/github/store/openGithubStore';
import { PostgresGithubDb } from '../../agent/github/store/postgresGithubDb';
import { SqliteGithubDb } from '../../agent/github/store/sqliteGithubDb';
import { GithubSimulator, type SimulatorOptions } from '../../simulator/github/githubSimulator';
import { newDatabase, storedCounts } from '../support/githubTestBed';
import { makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';
import { memoryLogger } from '../support/memoryLogger';
import { startTestPostgres, type TestPostgres } from '../support/postgres';
import { fillUp, freeUp, mountSmallTmpfs } from '../support/smallTmpfs';
import { tryLockSlot } from '../support/tryLockSlot';
import { runOf, startSync } from '../support/githubRunCli';
import { waitFor } from '../support/waitFor';

// Faults of an ordinary day do not lose a sync: its storage going away mid-sync (a PostgreSQL restart,
// a full disk) makes it wait and resume from its checkpoints with every record stored once; a sync that
// waits (for a slot, its storage, an agent) is never failed as stuck; one entry never syncs twice at once.

let server: TestPostgres;
before(async () => {
  server = await startTestPostgres({ restartable: true });
});
after(async () => {
  await server?.stop();
});

const DATA: SimulatorOptions = { repos: 12, pullRequestsPerRepo: 12, runsPerRepo: 10, jobsPerRun: 2, latencyMs: 30 };
const expected = (d: SimulatorOptions) => {
  const repos = d.repos as number;
  return { pullRequests: repos * d.pullRequestsPerRepo!, runs: repos * d.runsPerRepo!, jobs: repos * d.runsPerRepo! * d.jobsPerRun! };
};

type Engine = 'postgres' | 'sqlite';

async function openDb(engine: Engine, dir: string): Promise<GithubDb> {
  const db =
    engine === 'postgres'
      ? new PostgresGithubDb({ url: await newDatabase(server.url), logger: memoryLogger() })
      : new SqliteGithubDb(path.join(dir, 'gh.db'));
  await migrateGithub(db);
  return db;
}

interface Station {
  env: TestEnv;
  sim: GithubSimulator;
  /** The store as the test reads it (a connection of its own). */
  store: () => Promise<GithubStore>;
  close(): Promise<void>;
}

/** An agent's station with one github-sync entry; PostgreSQL when `dbUrl`, else the SQLite file in `githubHome` (or the home). */
async function station(data: SimulatorOptions, opts: { dbUrl?: string; githubHome?: string; slots?: number } = {}): Promise<Station> {
  const sim = new GithubSimulator(data);
  const url = await sim.start();
  const env = makeTestEnv([{ name: 'other', pool: 'network-light', argv: ['true'] }], {
    ...(opts.dbUrl !== undefined ? { QUANTILICA_DATABASE_URL: opts.dbUrl } : {}),
    QUANTILICA_GITHUB_API_URL: url,
    CRON_POOL_NETWORK_LIGHT_SLOTS: String(opts.slots ?? 1),
    CRON_POOL_NETWORK_LIGHT_TIMEOUT: '600',
    QUANTILICA_HEARTBEAT_SECONDS: '2',
  });
  if (opts.githubHome !== undefined) {
    // The sync's SQLite file on its own (small) filesystem; the agent's own state stays in the test's home.
    env.env.QUANTILICA_HOME = opts.githubHome;
    env.env.QUANTILICA_CONNECTION_FILE = path.join(env.home, '.quantilica', 'agent.json');
  }
  const catalog = JSON.parse(fs.readFileSync(env.env.QUANTILICA_CATALOG!, 'utf8')) as { fetchers: object[] };
  catalog.fetchers.push({ name: 'github', kind: 'github-sync', pool: 'network-light', repos: sim.repoNames, concurrency: 3 });
  fs.writeFileSync(env.env.QUANTILICA_CATALOG!, JSON.stringify(catalog));
  let store: GithubStore | null = null;
  return {
    env,
    sim,
    store: async () => {
      if (store === null) {
        const db =
          opts.dbUrl !== undefined
            ? new PostgresGithubDb({ url: opts.dbUrl, logger: memoryLogger() })
            : new SqliteGithubDb(path.join(opts.githubHome ?? path.join(env.home, '.quantilica'), GITHUB_SQLITE_FILE));
        await migrateGithub(db);
        store = new GithubStore(db);
      }
      return store;
    },
    close: async () => {
      await sim.stop();
      await store?.db.close().catch(() => {});
    },
  };
}

const ended = (env: TestEnv, runId: string) =>
  waitFor(
    async () => {
      const run = await runOf(env, runId);
      return run.status === 'completed' || run.status === 'failed' || run.status === 'cancelled' ? run : null;
    },
    { what: 'the sync to end', timeoutMs: 240_000, intervalMs: 250 },
  );

/** The sync has stored part of its records, not all. */
const midSync = (st: Station, runId: string) =>
  waitFor(
    async () => {
      const row = await (await st.store()).syncOfRun(runId);
      return row !== null && row.records_collected > 20 ? row : null;
    },
    { what: 'the sync to be under way', timeoutMs: 60_000, intervalMs: 20 },
  );

const waitsForStorage = (st: Station, runId: string) =>
  waitFor(
    async () => {
      const run = await runOf(st.env, runId);
      assert.ok(
        run.status === 'waiting' || run.status === 'running',
        `the run did not end while its storage was away: ${JSON.stringify(run)}`,
      );
      return run.wait?.kind === 'storage' ? run : null;
    },
    { what: 'the run to wait for its storage', timeoutMs: 60_000, intervalMs: 100 },
  );

async function assertEveryRecordOnce(st: Station, runId: string, data: SimulatorOptions): Promise<void> {
  const store = await st.store();
  assert.deepEqual(await storedCounts(store), expected(data));
  const sync = (await store.syncOfRun(runId))!;
  assert.equal(sync.status, 'completed');
  const e = expected(data);
  // Created counts each record the first time it is stored: equal to the data, none lost or made twice.
  assert.equal(sync.records_created, e.pullRequests + e.runs + e.jobs);
  const rows = await store.db.query<{ n: number }>("SELECT count(*) AS n FROM github.sync WHERE status = 'running'");
  assert.equal(Number(rows[0].n), 0, 'no sync row is left running');
}

for (const engine of ['postgres', 'sqlite'] as const) {
  test(`${engine}: the reconciler fails a leg that works without progress, never a sync that waits or whose agent was gone 31 min`, async () => {
    const dir = fs.mkdtempSync(path.join('/tmp', 'qt-gh-'));
    const db = await openDb(engine, dir);
    let now = Date.parse('2026-12-02T09:00:00Z');
    const store = new GithubStore(db, () => now);
    try {
      const working = await store.createSync(['a/b']);
      const agentGone = await store.createSync(['a/b']);
      const waitingForSlot = await store.createSync(['a/b']);
      const hibernating = await store.createSync(['a/b']);
      for (const id of [working, agentGone, waitingForSlot, hibernating]) await store.legBegins(id);
      await store.legEnds(waitingForSlot);
      await store.hibernate(hibernating, now + 3_600_000, 'core', false);
      // 31 minutes pass: the working leg's agent keeps saying it works, without progress; the other
      // agent was down the whole time (its last word is 31 minutes old).
      now += 31 * 60_000;
      await store.legAlive(working);
      await store.legAlive(waitingForSlot).then(() => store.legEnds(waitingForSlot));
      assert.deepEqual(await store.reconcileStuck(GITHUB_STUCK_AFTER_MS), [working]);
      const rows = await Promise.all([working, agentGone, waitingForSlot, hibernating].map((id) => store.getSync(id)));
      assert.deepEqual(
        rows.map((r) => [r!.status, r!.reason]),
        [
          ['failed', 'stuck-no-progress'],
          ['running', null],
          ['running', null],
          ['running', null],
        ],
      );
      // The agent comes back and its leg starts: progress is measured from there, not from before.
      await store.legBegins(agentGone);
      now += 29 * 60_000;
      await store.legAlive(agentGone);
      assert.deepEqual(await store.reconcileStuck(GITHUB_STUCK_AFTER_MS), []);
    } finally {
      await db.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test(`${engine}: the database holds one running sync per entry; another entry or a later sync is free`, async () => {
    const dir = fs.mkdtempSync(path.join('/tmp', 'qt-gh-'));
    const db = await openDb(engine, dir);
    const store = new GithubStore(db);
    try {
      const first = await store.createSync(['a/b'], { owner: { entry: 'github', runId: 'r1' } });
      await assert.rejects(store.createSync(['a/b'], { owner: { entry: 'github', runId: 'r2' } }), (err: unknown) => {
        assert.ok(err instanceof SyncActiveError);
        assert.deepEqual([err.syncId, err.runId], [first, 'r1']);
        return true;
      });
      await store.createSync(['a/b'], { owner: { entry: 'github-other', runId: 'r3' } });
      await store.finish(first, 'completed', null);
      await store.createSync(['a/b'], { owner: { entry: 'github', runId: 'r4' } });
      const rows = await db.query<{ n: number }>("SELECT count(*) AS n FROM github.sync WHERE entry = 'github'");
      assert.equal(Number(rows[0].n), 2);
    } finally {
      await db.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test(`${engine}: three \`github sync --wait\` without an agent give one sync`, { timeout: 300_000 }, async () => {
    const dbUrl = engine === 'postgres' ? await newDatabase(server.url) : undefined;
    const st = await station({ ...DATA, repos: 6, latencyMs: 20 }, { dbUrl, slots: 3 });
    try {
      const results = await Promise.all([0, 1, 2].map(() => runCli(st.env, ['github', 'sync', '--wait', '--json'])));
      const store = await st.store();
      const syncs = await store.db.query<{ id: string; status: string }>('SELECT id, status FROM github.sync');
      assert.equal(syncs.length, 1, `one sync, not ${syncs.length}: ${results.map((r) => r.stderr).join('\n---\n')}`);
      assert.equal(syncs[0].status, 'completed');
      assert.ok(
        results.some((r) => r.code === 0),
        results.map((r) => `${r.code}: ${r.stderr}`).join('\n'),
      );
      assert.deepEqual(await storedCounts(store), expected({ ...DATA, repos: 6 }));
    } finally {
      await st.close();
    }
  });
}

test(
  'postgres: `run github` while its sync is active gives one sync (the second run is refused already-active)',
  { timeout: 240_000 },
  async () => {
    const st = await station(DATA, { dbUrl: await newDatabase(server.url), slots: 2 });
    const agent = await startAgent(st.env);
    try {
      const first = await startSync(st.env);
      await midSync(st, first);
      const second = await startSync(st.env);
      const refused = await ended(st.env, second);
      assert.deepEqual([refused.status, refused.reason], ['failed', 'already-active']);
      const done = await ended(st.env, first);
      assert.equal(done.status, 'completed', JSON.stringify(done));
      const store = await st.store();
      assert.equal((await store.db.query('SELECT id FROM github.sync')).length, 1);
      await assertEveryRecordOnce(st, first, DATA);
    } finally {
      agent.child.kill('SIGTERM');
      await new Promise((resolve) => agent.child.once('exit', resolve));
      await st.close();
    }
  },
);

/**
 * Takes the storage away mid-sync and gives it back once the run waits for it; the sync must then
 * complete with every record once. Gives the run as it was while it waited.
 */
async function storageLostMidSync(st: Station, lose: () => unknown, restore: () => unknown): Promise<RunInfo> {
  const agent = await startAgent(st.env);
  try {
    const runId = await startSync(st.env);
    await midSync(st, runId);
    await lose();
    let waiting: RunInfo;
    try {
      waiting = await waitsForStorage(st, runId);
    } finally {
      await restore();
    }
    const done = await ended(st.env, runId);
    assert.equal(done.status, 'completed', JSON.stringify(done));
    await assertEveryRecordOnce(st, runId, DATA);
    return waiting;
  } finally {
    agent.child.kill('SIGTERM');
    await new Promise((resolve) => agent.child.once('exit', resolve));
    await st.close();
  }
}

test(
  'postgres: a restart mid-sync makes the run wait for its storage, then complete with every record once',
  { timeout: 300_000 },
  async () => {
    const st = await station(DATA, { dbUrl: await newDatabase(server.url) });
    const waiting = await storageLostMidSync(
      st,
      () => server.serverDown!(),
      () => server.serverUp!(),
    );
    assert.equal(waiting.reason, 'hibernating');
    assert.equal(waiting.slot, null, 'the slot is free while the storage is away');
  },
);

test(
  'sqlite: a full disk mid-sync makes the run wait for its storage, then complete with every record once',
  { timeout: 300_000 },
  async (t) => {
    const disk = mountSmallTmpfs(t, 24);
    assert.ok(disk !== null, 'a full disk needs a small tmpfs: this test runs as root, as CI does');
    const st = await station(DATA, { githubHome: disk });
    const filler = path.join(disk, 'filler');
    const waiting = await storageLostMidSync(
      st,
      () => fillUp(filler),
      () => freeUp(filler),
    );
    assert.equal(waiting.wait?.kind === 'storage' ? waiting.wait.cause : null, 'disk-full');
  },
);

test('postgres: a sync waiting for a slot after 31 minutes of agent downtime is not failed as stuck', { timeout: 300_000 }, async () => {
  const st = await station(DATA, { dbUrl: await newDatabase(server.url) });
  let agent = await startAgent(st.env);
  let slot: ReturnType<typeof tryLockSlot> = null;
  try {
    const runId = await startSync(st.env);
    const row = await midSync(st, runId);
    agent.child.kill('SIGKILL');
    await new Promise((resolve) => agent.child.once('exit', resolve));
    const store = await st.store();
    // The agent stays down 31 minutes: its last progress and its last word are that old.
    await store.db.query('UPDATE github.sync SET progress_at = progress_at - $2, alive_at = alive_at - $2 WHERE id = $1', [
      row.id,
      31 * 60_000,
    ]);
    // The pool's one slot is someone else's: the adopted sync must wait for it.
    const lockPath = path.join(st.env.lockDir, 'network-light', 'slot_0.lock');
    slot = await waitFor(() => tryLockSlot(lockPath), { what: 'the dead agent’s slot to be free', timeoutMs: 30_000 });
    agent = await startAgent(st.env);
    await waitFor(
      async () => {
        const run = await runOf(st.env, runId);
        return run.status === 'waiting' && run.wait?.kind === 'pool' ? run : null;
      },
      { what: 'the adopted sync to wait for a slot', timeoutMs: 60_000, intervalMs: 100 },
    );
    assert.deepEqual(await store.reconcileStuck(GITHUB_STUCK_AFTER_MS), []);
    assert.equal((await store.getSync(row.id))!.status, 'running');
    slot.closeOwnCopy();
    slot = null;
    const done = await ended(st.env, runId);
    assert.equal(done.status, 'completed', JSON.stringify(done));
    await assertEveryRecordOnce(st, runId, DATA);
  } finally {
    slot?.closeOwnCopy();
    agent.child.kill('SIGTERM');
    await new Promise((resolve) => agent.child.once('exit', resolve));
    await st.close();
  }
});
