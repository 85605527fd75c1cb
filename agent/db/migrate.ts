import type pg from 'pg';
import type { Logger } from '../log/logger';
import type { Migration } from './migration';
import { MIGRATIONS } from './migrations';

/** Advisory lock key of schema changes ('quantilica-migrate'); every agent and CLI uses the same one. */
export const MIGRATION_LOCK_KEY = 0x5175_616e_4d69;

/**
 * Brings the database to the newest schema: all missing migrations in one transaction, under an advisory
 * lock so that two agents starting together do not both apply them. Returns the versions applied.
 */
export async function migrate(client: pg.ClientBase, logger: Logger, migrations: readonly Migration[] = MIGRATIONS): Promise<number[]> {
  checkOrder(migrations);
  // Every flushing process (a CLI flush too) starts here: skip the locked transaction when the schema
  // is already current, which is nearly always.
  const known = migrations.length === 0 ? 0 : migrations[migrations.length - 1].version;
  // Whoever connects (a test's client, a pool) gets the same pinned path; set again inside the
  // transaction below with SET LOCAL so nothing of ours runs with another one.
  await client.query('SET search_path = pg_catalog, pg_temp');
  await checkSchemaOwner(client);
  const exists = await client.query<{ table: string | null }>("SELECT to_regclass('core.schema_migration')::text AS table");
  if (exists.rows[0]?.table != null) {
    const current = await client.query<{ version: number | null }>('SELECT max(version) AS version FROM core.schema_migration');
    if ((current.rows[0]?.version ?? 0) >= known) return [];
  }
  await client.query('BEGIN');
  try {
    await client.query('SET LOCAL search_path = pg_catalog, pg_temp');
    await client.query('SELECT pg_catalog.pg_advisory_xact_lock($1)', [MIGRATION_LOCK_KEY]);
    // Under the lock: the schema may have been made by someone else since the first check.
    await checkSchemaOwner(client);
    await client.query('CREATE SCHEMA IF NOT EXISTS core');
    await client.query(`CREATE TABLE IF NOT EXISTS core.schema_migration (
      version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    const done = await client.query<{ version: number }>('SELECT version FROM core.schema_migration');
    const applied = new Set(done.rows.map((r) => r.version));
    const newest = Math.max(0, ...applied);
    if (newest > known) logger.warn({ newest, known }, 'the telemetry schema is newer than this agent knows; carrying on with it');
    const ran: number[] = [];
    for (const m of migrations) {
      if (applied.has(m.version)) continue;
      await client.query(m.sql);
      await client.query('INSERT INTO core.schema_migration (version, name) VALUES ($1, $2)', [m.version, m.name]);
      ran.push(m.version);
    }
    await client.query('COMMIT');
    if (ran.length > 0) logger.info({ versions: ran }, 'telemetry schema migrated');
    return ran;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  }
}

/** A `core` schema owned by another role than ours: its owner could replace what we write through. */
export class ForeignSchemaError extends Error {
  readonly reason = 'schema-owned-by-another-role';
}

async function checkSchemaOwner(client: pg.ClientBase): Promise<void> {
  const row = (
    await client.query<{ owner: string; me: string }>(
      "SELECT pg_catalog.pg_get_userbyid(nspowner)::text AS owner, current_user::text AS me FROM pg_catalog.pg_namespace WHERE nspname = 'core'",
    )
  ).rows[0];
  if (row === undefined || row.owner === row.me) return;
  throw new ForeignSchemaError(
    `schema "core" exists and is owned by role "${row.owner}", not by "${row.me}" (the role the flush logs in as): refused, ` +
      `its owner could change or read the telemetry tables; have "${row.owner}" drop it or ALTER SCHEMA core OWNER TO "${row.me}", or log in as "${row.owner}"`,
  );
}

function checkOrder(migrations: readonly Migration[]): void {
  migrations.forEach((m, i) => {
    if (m.version !== i + 1)
      throw new Error(`migration ${m.name} has version ${m.version}, expected ${i + 1}: the list is append-only and numbered from 1`);
  });
}
