import type pg from 'pg';
import { loadPg } from '../../db/loadPg';
import type { Logger } from '../../log/logger';
import type { GithubDb, SqlRunner, SqlValue } from './githubDb';

// bigint (int8) columns hold counters and epoch milliseconds, all far below 2^53: read them as numbers.
const INT8_OID = 20;
const parseInt8 = (text: string): number => Number(text);

export interface PostgresGithubDbOptions {
  url: string;
  logger: Logger;
  /** Pool size; the sync's concurrency ceiling is validated against it (see concurrency.ts). */
  poolSize?: number;
  queryTimeoutMs?: number;
}

export const DEFAULT_GITHUB_POOL_SIZE = 10;

/** The `github` schema on PostgreSQL, through a pool whose dropped connections are errors, never crashes. */
export class PostgresGithubDb implements GithubDb {
  readonly dialect = 'postgres' as const;
  readonly poolSize: number;
  private readonly pool: pg.Pool;

  constructor(options: PostgresGithubDbOptions) {
    this.poolSize = options.poolSize ?? DEFAULT_GITHUB_POOL_SIZE;
    const timeout = options.queryTimeoutMs ?? 60_000;
    this.pool = new (loadPg().Pool)({
      connectionString: options.url,
      max: this.poolSize,
      idleTimeoutMillis: 30_000,
      connectionTimeoutMillis: 10_000,
      query_timeout: timeout,
      statement_timeout: timeout,
      application_name: 'quantilica-github-sync',
      allowExitOnIdle: true,
      types: {
        getTypeParser: ((oid: number, format?: string): unknown =>
          oid === INT8_OID ? parseInt8 : loadPg().types.getTypeParser(oid, format as 'text')) as typeof pg.types.getTypeParser,
      },
    });
    this.pool.on('error', (err) => {
      options.logger.warn({ err: err.message }, 'idle github database connection lost');
    });
  }

  async query<T extends object>(sql: string, params: readonly SqlValue[] = []): Promise<T[]> {
    const result = await this.pool.query(sql, params as SqlValue[]);
    return result.rows as T[];
  }

  async script(sql: string): Promise<void> {
    await this.pool.query(sql);
  }

  async transaction<T>(fn: (tx: SqlRunner) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    const tx: SqlRunner = {
      dialect: 'postgres',
      query: async <R extends object>(sql: string, params: readonly SqlValue[] = []) =>
        (await client.query(sql, params as SqlValue[])).rows as R[],
      script: async (sql: string) => {
        await client.query(sql);
      },
    };
    let failure: Error | undefined;
    try {
      await client.query('BEGIN');
      const value = await fn(tx);
      await client.query('COMMIT');
      return value;
    } catch (err) {
      failure = err instanceof Error ? err : new Error(String(err));
      await client.query('ROLLBACK').catch(() => {});
      throw err;
    } finally {
      client.release(failure);
    }
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}
