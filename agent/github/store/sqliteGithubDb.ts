import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { GithubDb, SqlRunner, SqlValue } from './githubDb';

/**
 * The `github` schema in an embedded SQLite file, for a station without PostgreSQL. The file is attached
 * under the name `github`, so the very statements written for PostgreSQL (`github.sync`, …) run here.
 * One connection per process; statements of concurrent tasks are serialised by a promise chain so that
 * a transaction never interleaves with another task's statements. Other processes are kept apart by
 * SQLite's own locking (WAL, busy timeout).
 */
export class SqliteGithubDb implements GithubDb {
  readonly dialect = 'sqlite' as const;
  readonly poolSize = 1;
  private readonly db: Database.Database;
  private readonly statements = new Map<string, Database.Statement>();
  private chain: Promise<unknown> = Promise.resolve();

  constructor(file: string) {
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    // Create it private before SQLite opens it: nothing of ours is readable by other users.
    fs.closeSync(fs.openSync(file, fs.constants.O_CREAT | fs.constants.O_RDWR | fs.constants.O_NOFOLLOW, 0o600));
    this.db = new Database(':memory:');
    this.db.prepare('ATTACH DATABASE ? AS github').run(file);
    this.db.pragma('github.journal_mode = WAL');
    // NORMAL in WAL survives a crash of the agent; a power cut may lose the last commits, which the
    // next sync fetches again (GitHub keeps them), so FULL's fsync per commit is not worth it here.
    this.db.pragma('github.synchronous = NORMAL');
    this.db.pragma('busy_timeout = 30000');
  }

  query<T extends object>(sql: string, params: readonly SqlValue[] = []): Promise<T[]> {
    return this.serial(() => this.run<T>(sql, params));
  }

  script(sql: string): Promise<void> {
    return this.serial(() => {
      this.db.exec(sql);
    });
  }

  transaction<T>(fn: (tx: SqlRunner) => Promise<T>): Promise<T> {
    return this.serial(async () => {
      // IMMEDIATE: take the write lock at once, so two processes never deadlock upgrading read locks.
      this.db.exec('BEGIN IMMEDIATE');
      try {
        const value = await fn({
          dialect: 'sqlite',
          query: <R extends object>(sql: string, params: readonly SqlValue[] = []) => Promise.resolve(this.run<R>(sql, params)),
          script: (sql: string) => {
            this.db.exec(sql);
            return Promise.resolve();
          },
        });
        this.db.exec('COMMIT');
        return value;
      } catch (err) {
        if (this.db.inTransaction) this.db.exec('ROLLBACK');
        throw err;
      }
    });
  }

  close(): Promise<void> {
    return this.serial(() => {
      this.db.close();
    });
  }

  private serial<T>(fn: () => T | Promise<T>): Promise<T> {
    const next = this.chain.then(fn, fn);
    this.chain = next.catch(() => {});
    return next;
  }

  private run<T>(sql: string, params: readonly SqlValue[]): T[] {
    let statement = this.statements.get(sql);
    if (!statement) {
      // `$1` is a PostgreSQL placeholder; better-sqlite3 binds named ones: `@p1` from { p1: … }.
      statement = this.db.prepare(sql.replace(/\$(\d+)/g, '@p$1'));
      this.statements.set(sql, statement);
    }
    const named: Record<string, SqlValue> = {};
    params.forEach((v, i) => {
      named[`p${i + 1}`] = v;
    });
    const args = params.length > 0 ? [named] : [];
    if (statement.reader) return statement.all(...args) as T[];
    statement.run(...args);
    return [];
  }
}
