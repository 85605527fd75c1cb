import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import { memoryLogger } from '../support/memoryLogger';
import { GithubStore } from '../../agent/github/store/githubStore';
import { migrateGithub } from '../../agent/github/store/migrateGithub';
import { PostgresGithubDb } from '../../agent/github/store/postgresGithubDb';
import { SqliteGithubDb } from '../../agent/github/store/sqliteGithubDb';
import { runWorkers } from '../fixtures/githubCounterWorker';
import { OUT_FIXTURES } from '../support/harness';
import { startTestPostgres, type TestPostgres } from '../support/postgres';

// ADR 0006's verification of item 2: N concurrent increments sum to N; the read-modify-write tally
// does not, and that failure is what makes the first test proof.
const WORKERS = 50;
const INCREMENTS = 1_000;

let pgServer: TestPostgres;
let dir: string;

before(async () => {
  pgServer = await startTestPostgres();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-gh-counter-'));
});
after(async () => {
  await pgServer?.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function onPostgres(mode: 'atomic' | 'rmw'): Promise<number> {
  const db = new PostgresGithubDb({ url: pgServer.url, logger: memoryLogger(), poolSize: WORKERS });
  try {
    await migrateGithub(db);
    const store = new GithubStore(db);
    const id = await store.createSync(['a/b']);
    await runWorkers(db, id, WORKERS, INCREMENTS, mode);
    return (await store.getSync(id))!.records_collected;
  } finally {
    await db.close();
  }
}

/** 5 processes × 10 workers, each process with its own connection to the same SQLite file. */
async function onSqlite(mode: 'atomic' | 'rmw'): Promise<number> {
  const file = path.join(dir, `${mode}.db`);
  const db = new SqliteGithubDb(file);
  await migrateGithub(db);
  const store = new GithubStore(db);
  const id = await store.createSync(['a/b']);
  const processes = 5;
  const outcomes = await Promise.all(
    Array.from(
      { length: processes },
      () =>
        new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
          const child = spawn(
            process.execPath,
            [path.join(OUT_FIXTURES, 'githubCounterWorker.js'), file, id, String(WORKERS / processes), String(INCREMENTS), mode],
            { stdio: ['ignore', 'pipe', 'pipe'] },
          );
          let out = '';
          let err = '';
          child.stdout.on('data', (d: Buffer) => {
            out += d.toString();
          });
          child.stderr.on('data', (d: Buffer) => {
            err += d.toString();
          });
          child.on('close', (code) => resolve({ code, out, err }));
        }),
    ),
  );
  for (const o of outcomes) assert.equal(o.code, 0, o.err);
  const total = (await store.getSync(id))!.records_collected;
  await db.close();
  return total;
}

test('PostgreSQL: 50 concurrent workers x 1,000 increments give exactly 50,000', { timeout: 240_000 }, async () => {
  assert.equal(await onPostgres('atomic'), WORKERS * INCREMENTS);
});

test('PostgreSQL: the same workers with a read-modify-write tally lose updates', { timeout: 240_000 }, async () => {
  const total = await onPostgres('rmw');
  assert.ok(total < WORKERS * INCREMENTS, `read-modify-write kept all ${total} increments`);
});

test('SQLite: 5 processes x 10 workers x 1,000 increments give exactly 50,000', { timeout: 240_000 }, async () => {
  assert.equal(await onSqlite('atomic'), WORKERS * INCREMENTS);
});

test('SQLite: the same processes with a read-modify-write tally lose updates', { timeout: 240_000 }, async () => {
  const total = await onSqlite('rmw');
  assert.ok(total < WORKERS * INCREMENTS, `read-modify-write kept all ${total} increments`);
});

test('migrations: applied once, the second time a no-op, on both engines', async () => {
  const pgDb = new PostgresGithubDb({ url: pgServer.url, logger: memoryLogger() });
  const sqlite = new SqliteGithubDb(path.join(dir, 'migrate.db'));
  try {
    assert.deepEqual(await migrateGithub(sqlite), [1, 2, 3, 4, 5]);
    assert.deepEqual(await migrateGithub(sqlite), []);
    await migrateGithub(pgDb);
    assert.deepEqual(await migrateGithub(pgDb), []);
    const tables = await pgDb.query<{ t: string }>(
      "SELECT table_name AS t FROM information_schema.tables WHERE table_schema = 'github' ORDER BY 1",
    );
    assert.deepEqual(
      tables.map((r) => r.t),
      ['checkpoint', 'etag', 'pull_request', 'schema_migration', 'stream_state', 'sync', 'workflow_job', 'workflow_run'],
    );
    assert.equal(fs.statSync(path.join(dir, 'migrate.db')).mode & 0o777, 0o600);
  } finally {
    await pgDb.close();
    await sqlite.close();
  }
});
