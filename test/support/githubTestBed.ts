import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before } from 'node:test';
import pg from 'pg';
import { memoryLogger } from './memoryLogger';
import { startTestPostgres, type TestPostgres } from './postgres';
import { GithubStore } from '../../agent/github/store/githubStore';
import { migrateGithub } from '../../agent/github/store/migrateGithub';
import { PostgresGithubDb } from '../../agent/github/store/postgresGithubDb';
import { SqliteGithubDb } from '../../agent/github/store/sqliteGithubDb';
import { GithubSimulator, type SimulatorOptions } from '../../simulator/github/githubSimulator';

/** A new, empty database in the test cluster, so that each scenario starts with nothing stored. */
export async function newDatabase(serverUrl: string): Promise<string> {
  const name = `gh_${crypto.randomBytes(5).toString('hex')}`;
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(`CREATE DATABASE ${name}`);
  } finally {
    await client.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

export interface GithubBed {
  sim: GithubSimulator;
  store: GithubStore;
  url: string;
  close(): Promise<void>;
}

/** A simulator and a migrated PostgreSQL store of their own. */
export async function githubBed(serverUrl: string, options: SimulatorOptions): Promise<GithubBed> {
  const sim = new GithubSimulator(options);
  const url = await sim.start();
  const db = new PostgresGithubDb({ url: await newDatabase(serverUrl), logger: memoryLogger() });
  await migrateGithub(db);
  const store = new GithubStore(db);
  return {
    sim,
    store,
    url,
    close: async () => {
      await sim.stop();
      await db.close();
    },
  };
}

/** Rows stored, per table. */
export async function storedCounts(store: GithubStore): Promise<{ pullRequests: number; runs: number; jobs: number }> {
  const count = async (table: string) => Number((await store.db.query<{ n: number }>(`SELECT count(*) AS n FROM github.${table}`))[0].n);
  return { pullRequests: await count('pull_request'), runs: await count('workflow_run'), jobs: await count('workflow_job') };
}

/** The same bed on a private SQLite file (the engine of a station without PostgreSQL). */
export async function githubSqliteBed(options: SimulatorOptions): Promise<GithubBed> {
  const sim = new GithubSimulator(options);
  const url = await sim.start();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-gh-bed-'));
  const db = new SqliteGithubDb(path.join(dir, 'github.db'));
  await migrateGithub(db);
  return {
    sim,
    store: new GithubStore(db),
    url,
    close: async () => {
      await sim.stop();
      await db.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** What the sync stored of one repository, in the simulator's shapes (to compare with `sim.data`). */
export async function storedRepo(store: GithubStore, repo: string): Promise<{ pullRequests: unknown[]; runs: unknown[]; jobs: unknown[] }> {
  const pullRequests = (
    await store.db.query<Record<string, string | number | null>>(
      `SELECT id, number, title, state, created_at, updated_at, merged_at, closed_at, is_draft, review_decision, author,
        base_ref, head_ref, head_sha, checks_state FROM github.pull_request WHERE repo = $1 ORDER BY number`,
      [repo],
    )
  ).map((r) => ({
    id: r.id,
    number: Number(r.number),
    title: r.title,
    state: r.state,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    mergedAt: r.merged_at,
    closedAt: r.closed_at,
    isDraft: Number(r.is_draft) === 1,
    reviewDecision: r.review_decision,
    author: r.author === null ? null : { login: r.author },
    baseRefName: r.base_ref,
    headRefName: r.head_ref,
    headRefOid: r.head_sha,
    statusCheckRollup: r.checks_state === null ? null : { state: r.checks_state },
  }));
  const runs = (
    await store.db.query<Record<string, string | number | null>>(
      `SELECT id, name, status, conclusion, created_at, updated_at, run_attempt, event, head_sha, head_branch, run_started_at,
        actor, pull_requests FROM github.workflow_run WHERE repo = $1 ORDER BY id`,
      [repo],
    )
  ).map((r) => ({
    id: Number(r.id),
    name: r.name,
    status: r.status,
    conclusion: r.conclusion,
    created_at: r.created_at,
    updated_at: r.updated_at,
    run_attempt: Number(r.run_attempt),
    event: r.event,
    head_sha: r.head_sha,
    head_branch: r.head_branch,
    run_started_at: r.run_started_at,
    actor: r.actor === null ? null : { login: r.actor },
    pull_requests: (JSON.parse(String(r.pull_requests)) as number[]).map((number) => ({ number })),
  }));
  const jobs = (
    await store.db.query<Record<string, string | number | null>>(
      `SELECT j.id, j.run_id, j.run_attempt, j.name, j.status, j.conclusion, j.created_at, j.started_at, j.completed_at, j.runner_name
      FROM github.workflow_job j JOIN github.workflow_run r ON r.id = j.run_id WHERE r.repo = $1 ORDER BY j.id`,
      [repo],
    )
  ).map((r) => ({ ...r, id: Number(r.id), run_id: Number(r.run_id), run_attempt: Number(r.run_attempt) }));
  return { pullRequests, runs, jobs };
}

/** The simulator's data of one repository, ordered as `storedRepo` orders it. */
export function simulatedRepo(sim: GithubSimulator, repo: string): { pullRequests: unknown[]; runs: unknown[]; jobs: unknown[] } {
  const data = sim.data(repo)!;
  return {
    pullRequests: [...data.pullRequests].sort((a, b) => a.number - b.number),
    runs: [...data.runs].sort((a, b) => a.id - b.id),
    jobs: [...data.jobs.values()].flat().sort((a, b) => a.id - b.id),
  };
}

/** The two engines the sync's store runs on. */
export const GITHUB_ENGINES = ['postgres', 'sqlite'] as const;
export type GithubEngine = (typeof GITHUB_ENGINES)[number];

/**
 * For a test file on both engines: a PostgreSQL server for the file's tests (started before, stopped
 * after them) and a bed on either engine, a fresh database of that server or a private SQLite file.
 */
export function engineBeds(): (engine: GithubEngine, options: SimulatorOptions) => Promise<GithubBed> {
  let server: TestPostgres | undefined;
  before(async () => {
    server = await startTestPostgres();
  });
  after(async () => {
    await server?.stop();
  });
  return (engine, options) => (engine === 'postgres' ? githubBed(server!.url, options) : githubSqliteBed(options));
}
