import type { Dialect } from './githubDb';

/**
 * One multi-row upsert by GitHub id per page, from a JSON array parameter ($1); $2 is the sync id and
 * $3 the repository (when the table has one). PostgreSQL tells inserted from updated rows by xmax;
 * SQLite's caller counts the ids already present inside the same (exclusive) transaction instead.
 * A row with `updated_at` is never replaced by an answer older than it (a page read before a later
 * one was written, a slow leg): GitHub's times are ISO-8601 UTC, so text order is time order.
 */
interface Column {
  name: string;
  type: 'text' | 'integer' | 'bigint';
  key?: string;
}

interface Entity {
  table: string;
  columns: Column[];
  hasRepo: boolean;
}

const entities = {
  pull_request: {
    table: 'github.pull_request',
    hasRepo: true,
    columns: [
      { name: 'id', type: 'text' },
      { name: 'number', type: 'integer' },
      { name: 'title', type: 'text' },
      { name: 'state', type: 'text' },
      { name: 'created_at', type: 'text', key: 'createdAt' },
      { name: 'updated_at', type: 'text', key: 'updatedAt' },
      { name: 'merged_at', type: 'text', key: 'mergedAt' },
      { name: 'author', type: 'text' },
      { name: 'is_draft', type: 'integer', key: 'isDraft' },
      { name: 'review_decision', type: 'text', key: 'reviewDecision' },
      { name: 'closed_at', type: 'text', key: 'closedAt' },
      { name: 'base_ref', type: 'text', key: 'baseRefName' },
      { name: 'head_ref', type: 'text', key: 'headRefName' },
      { name: 'head_sha', type: 'text', key: 'headRefOid' },
      { name: 'checks_state', type: 'text', key: 'checksState' },
    ],
  },
  workflow_run: {
    table: 'github.workflow_run',
    hasRepo: true,
    columns: [
      { name: 'id', type: 'bigint' },
      { name: 'name', type: 'text' },
      { name: 'status', type: 'text' },
      { name: 'conclusion', type: 'text' },
      { name: 'created_at', type: 'text' },
      { name: 'updated_at', type: 'text' },
      { name: 'run_attempt', type: 'integer' },
      { name: 'event', type: 'text' },
      { name: 'head_sha', type: 'text' },
      { name: 'head_branch', type: 'text' },
      { name: 'run_started_at', type: 'text' },
      { name: 'actor', type: 'text' },
      { name: 'pull_requests', type: 'text' },
    ],
  },
  workflow_job: {
    table: 'github.workflow_job',
    hasRepo: false,
    columns: [
      { name: 'id', type: 'bigint' },
      { name: 'run_id', type: 'bigint' },
      { name: 'run_attempt', type: 'integer' },
      { name: 'name', type: 'text' },
      { name: 'status', type: 'text' },
      { name: 'conclusion', type: 'text' },
      { name: 'created_at', type: 'text' },
      { name: 'started_at', type: 'text' },
      { name: 'completed_at', type: 'text' },
      { name: 'runner_name', type: 'text' },
    ],
  },
} satisfies Record<string, Entity>;

export type EntityName = keyof typeof entities;

export function upsertSql(entity: EntityName, dialect: Dialect): string {
  const e: Entity = entities[entity];
  const key = (c: Column) => c.key ?? c.name;
  const names = [...e.columns.map((c) => c.name), 'sync_id', ...(e.hasRepo ? ['repo'] : [])];
  const updates = names
    .filter((n) => n !== 'id')
    .map((n) => `${n} = excluded.${n}`)
    .join(', ');
  // SQLite reads an unqualified column of an upsert's WHERE as the stored row's.
  const stored = dialect === 'postgres' ? `${e.table}.updated_at` : 'updated_at';
  const newer = e.columns.some((c) => c.name === 'updated_at') ? ` WHERE ${stored} <= excluded.updated_at` : '';
  if (dialect === 'postgres') {
    const shape = e.columns.map((c) => `"${key(c)}" ${c.type}`).join(', ');
    const values = [...e.columns.map((c) => `r."${key(c)}"`), '$2', ...(e.hasRepo ? ['$3'] : [])].join(', ');
    return `INSERT INTO ${e.table} (${names.join(', ')}) SELECT ${values} FROM json_to_recordset($1::json) AS r(${shape})
      ON CONFLICT (id) DO UPDATE SET ${updates}${newer} RETURNING (xmax = 0) AS created`;
  }
  const values = [...e.columns.map((c) => `value ->> '$.${key(c)}'`), '$2', ...(e.hasRepo ? ['$3'] : [])].join(', ');
  // "WHERE true": SQLite's grammar needs it to tell an upsert's ON from a join's.
  return `INSERT INTO ${e.table} (${names.join(', ')}) SELECT ${values} FROM json_each($1) WHERE true
    ON CONFLICT (id) DO UPDATE SET ${updates}${newer}`;
}

/** SQLite only: how many of the page's ids are already stored. */
export function existingSql(entity: EntityName): string {
  return `SELECT count(*) AS n FROM ${entities[entity].table} WHERE id IN (SELECT value ->> '$.id' FROM json_each($1))`;
}
