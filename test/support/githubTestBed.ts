import * as crypto from 'node:crypto';
import pg from 'pg';
import { memoryLogger } from './memoryLogger';
import { GithubStore } from '../../agent/github/store/githubStore';
import { migrateGithub } from '../../agent/github/store/migrateGithub';
import { PostgresGithubDb } from '../../agent/github/store/postgresGithubDb';
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
  const count = async (table: string) =>
    Number((await store.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM github.${table}`))[0].n);
  return { pullRequests: await count('pull_request'), runs: await count('workflow_run'), jobs: await count('workflow_job') };
}
