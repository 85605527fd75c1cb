import * as path from 'node:path';
import type { Logger } from '../../log/logger';
import { GithubStore } from './githubStore';
import { migrateGithub } from './migrateGithub';
import { PostgresGithubDb } from './postgresGithubDb';
import { SqliteGithubDb } from './sqliteGithubDb';

export interface OpenGithubStoreOptions {
  /** QUANTILICA_DATABASE_URL; null: the embedded SQLite file. */
  databaseUrl: string | null;
  /** QUANTILICA_HOME, where the SQLite file lives. */
  homeDir: string;
  logger: Logger;
  poolSize?: number;
}

export const GITHUB_SQLITE_FILE = 'github_sync.db';

/** The store on PostgreSQL when a database URL is configured, else on `<home>/github_sync.db`; migrated. */
export async function openGithubStore(options: OpenGithubStoreOptions): Promise<GithubStore> {
  const db =
    options.databaseUrl !== null && options.databaseUrl !== ''
      ? new PostgresGithubDb({ url: options.databaseUrl, logger: options.logger, poolSize: options.poolSize })
      : new SqliteGithubDb(path.join(options.homeDir, GITHUB_SQLITE_FILE));
  try {
    await migrateGithub(db);
  } catch (err) {
    await db.close();
    throw err;
  }
  return new GithubStore(db);
}
