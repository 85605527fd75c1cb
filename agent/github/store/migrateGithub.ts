import type { GithubDb } from './githubDb';
import { GITHUB_MIGRATIONS, type GithubMigration } from './githubMigrations';

/** Advisory lock key of the github schema's changes ('quantilica-github'); apart from the telemetry's. */
export const GITHUB_MIGRATION_LOCK_KEY = 0x5175_6147_6875;

/**
 * Brings the `github` schema to the newest version: every missing migration in one transaction, under
 * an advisory lock on PostgreSQL (BEGIN IMMEDIATE, the file's write lock, on SQLite), so two processes
 * starting together apply each step once. Returns the versions applied.
 */
export async function migrateGithub(db: GithubDb, migrations: readonly GithubMigration[] = GITHUB_MIGRATIONS): Promise<number[]> {
  migrations.forEach((m, i) => {
    if (m.version !== i + 1) throw new Error(`github migration ${m.name} has version ${m.version}, expected ${i + 1}`);
  });
  return db.transaction(async (tx) => {
    if (tx.dialect === 'postgres') {
      await tx.query('SELECT pg_advisory_xact_lock($1)', [GITHUB_MIGRATION_LOCK_KEY]);
      await tx.script('CREATE SCHEMA IF NOT EXISTS github');
    }
    await tx.script(
      'CREATE TABLE IF NOT EXISTS github.schema_migration (version integer PRIMARY KEY, name text NOT NULL, applied_at bigint NOT NULL)',
    );
    const done = new Set(
      (await tx.query<{ version: number }>('SELECT version FROM github.schema_migration')).map((r) => Number(r.version)),
    );
    const ran: number[] = [];
    for (const m of migrations) {
      if (done.has(m.version)) continue;
      await tx.script(tx.dialect === 'postgres' ? m.postgres : m.sqlite);
      await tx.query('INSERT INTO github.schema_migration (version, name, applied_at) VALUES ($1, $2, $3)', [
        m.version,
        m.name,
        Date.now(),
      ]);
      ran.push(m.version);
    }
    return ran;
  });
}
