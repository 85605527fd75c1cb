/** Which SQL engine holds the `github` schema: PostgreSQL when configured, else an embedded SQLite file. */
export type Dialect = 'postgres' | 'sqlite';

export type SqlValue = string | number | null;

/**
 * The narrow SQL surface the GitHub store is written against, so that one store (one set of
 * statements, the same increments) runs on both engines. Statements use `$1…` placeholders; the SQLite
 * side rewrites them. Rows come back with numbers as JS numbers on both sides.
 */
export interface SqlRunner {
  readonly dialect: Dialect;
  query<T extends object = Record<string, unknown>>(sql: string, params?: readonly SqlValue[]): Promise<T[]>;
  /** Several statements without parameters (a migration). */
  script(sql: string): Promise<void>;
}

export interface GithubDb extends SqlRunner {
  /** Connections the database side may hold at once (PostgreSQL pool size; 1 for SQLite). */
  readonly poolSize: number;
  /** Runs `fn` in one transaction; it commits when `fn` resolves and rolls back when it throws. */
  transaction<T>(fn: (tx: SqlRunner) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}
