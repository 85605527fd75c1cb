// The checks before SQLite opens the spool by name race with other processes that have it open: when
// the last of their connections closes, SQLite removes the -wal and -shm. A companion that goes between
// the check's lstat and its narrowing of the mode is not an error: the open goes on.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { guardSqliteFiles } from '../../agent/telemetry/sqliteFileGuard';
import { makeTestEnv } from '../support/harness';

test("a -shm removed by another process's close between the check's lstat and its chmod does not fail the open", () => {
  const { root } = makeTestEnv(null);
  const file = path.join(root, 'spool.db');
  for (const name of [file, `${file}-wal`, `${file}-shm`]) fs.writeFileSync(name, '', { mode: 0o644 });
  fs.chmodSync(file, 0o644);
  fs.chmodSync(`${file}-shm`, 0o644);
  const lstat = fs.lstatSync;
  let removed = false;
  // The other process's close lands right after the check has read the -shm's mode.
  const writable = fs as { lstatSync: typeof fs.lstatSync };
  writable.lstatSync = ((...args: Parameters<typeof fs.lstatSync>) => {
    const st = lstat(...args);
    if (args[0] === `${file}-shm` && st !== undefined && !removed) {
      fs.unlinkSync(`${file}-shm`);
      removed = true;
    }
    return st;
  }) as typeof fs.lstatSync;
  try {
    guardSqliteFiles(file);
  } finally {
    writable.lstatSync = lstat;
  }
  assert.ok(removed, 'the -shm went between the lstat and the chmod');
  assert.equal(fs.statSync(file).mode & 0o777, 0o600, 'the database was narrowed all the same');
  assert.equal(fs.existsSync(`${file}-shm`), false);
});
