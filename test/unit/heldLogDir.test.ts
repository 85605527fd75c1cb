import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test, type TestContext } from 'node:test';
import { HeldLogDir } from '../../agent/runs/heldLogDir';
import { UnsafeStationError } from '../../agent/station/unsafeStationError';
import { removeAtExit } from '../support/removeAtExit';

/** A private log folder in a fresh folder, and a held handle on it closed after the test. */
function heldLog(t: TestContext) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-heldlog-'));
  removeAtExit(root);
  const logDir = path.join(root, 'logs');
  fs.mkdirSync(logDir, { mode: 0o700 });
  const held = new HeldLogDir();
  t.after(() => held.close());
  return { logDir, held };
}

/** Another folder at the path (the held one renamed away), as a tmp cleaner or an operator might leave it. */
function replace(logDir: string): void {
  fs.renameSync(logDir, `${logDir}.old`);
  fs.mkdirSync(logDir, { mode: 0o700 });
}

/** The folder a descriptor is open on, or null once it is closed. */
function folderOf(fd: number): fs.Stats | null {
  try {
    return fs.fstatSync(fd);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EBADF') return null;
    throw err;
  }
}

test('the log folder is lent again while it is unchanged, and a replaced one is opened again', (t) => {
  const { logDir, held } = heldLog(t);
  const first = held.lend(logDir, 'DATA_DIR');
  first.release();
  const second = held.lend(logDir, 'DATA_DIR');
  assert.equal(second.fd, first.fd, 'the same descriptor, not a new open');
  second.release();
  replace(logDir);
  const third = held.lend(logDir, 'DATA_DIR');
  assert.equal(folderOf(third.fd)?.ino, fs.lstatSync(logDir).ino, 'the folder the path names now');
  third.release();
});

test('a descriptor lent to a spawn stays open until that spawn gives it back, though the folder was replaced meanwhile', (t) => {
  const { logDir, held } = heldLog(t);
  const lent = held.lend(logDir, 'DATA_DIR');
  const ino = fs.lstatSync(logDir).ino;
  replace(logDir);
  const next = held.lend(logDir, 'DATA_DIR');
  assert.notEqual(next.fd, lent.fd);
  // The spawner takes its copy by number after the request: the number must still name the folder it was lent.
  assert.equal(folderOf(lent.fd)?.ino, ino);
  lent.release();
  assert.equal(folderOf(lent.fd), null, 'closed once its last spawn is done');
  lent.release();
  assert.equal(folderOf(next.fd)?.ino, fs.lstatSync(logDir).ino, 'a second release of the old lease closes nothing else');
  next.release();
});

test('a log folder opened to other accounts while held is refused, not lent', (t) => {
  const { logDir, held } = heldLog(t);
  held.lend(logDir, 'DATA_DIR').release();
  fs.chmodSync(logDir, 0o777);
  assert.throws(() => held.lend(logDir, 'DATA_DIR'), UnsafeStationError);
  fs.chmodSync(logDir, 0o700);
  held.lend(logDir, 'DATA_DIR').release();
});
