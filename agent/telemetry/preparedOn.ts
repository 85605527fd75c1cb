import type Database from 'better-sqlite3';

const byConnection = new WeakMap<Database.Database, Map<string, Database.Statement>>();

/**
 * `sql` prepared once per connection: SQLite compiles a statement on every `prepare`, which cost a
 * read on the hot path (a client waiting for an ended run) more than the read itself. A reopened
 * spool is a new connection, so a statement never outlives the file it was prepared on.
 */
export function preparedOn(db: Database.Database, sql: string): Database.Statement {
  let statements = byConnection.get(db);
  if (statements === undefined) {
    statements = new Map();
    byConnection.set(db, statements);
  }
  let statement = statements.get(sql);
  if (statement === undefined) {
    statement = db.prepare(sql);
    statements.set(sql, statement);
  }
  return statement;
}
