import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { LogCapper } from '../../agent/runs/logCap';
import { waitFor } from '../support/waitFor';

const CAP = 1024;
/** Longer than any wait below: a log capped in time was capped on the folder's inotify event. */
const NO_BACKSTOP_MS = 3_600_000;

function openLog(file: string): number {
  return fs.openSync(file, fs.constants.O_RDWR | fs.constants.O_APPEND | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o600);
}

function grow(file: string, bytes: number): void {
  fs.appendFileSync(file, Buffer.alloc(bytes, 0x61));
}

test('logs of one folder are capped on write through the folder watch, also after a rename within it and after the folder is made anew', async (t) => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'logcap-'));
  t.after(() => fs.rmSync(root, { recursive: true, force: true }));
  const dir = path.join(root, 'logs');
  fs.mkdirSync(dir, { mode: 0o700 });
  const capper = new LogCapper(CAP, NO_BACKSTOP_MS);
  t.after(() => capper.close());

  const a = path.join(dir, 'a.log');
  const b = path.join(dir, 'b.log');
  capper.watch(a, openLog(a));
  capper.watch(b, openLog(b));
  grow(a, 10 * CAP);
  grow(b, 10 * CAP);
  assert.equal(capper.folderWatches, 1, 'one watch for the folder, not one per log');
  await waitFor(() => fs.statSync(a).size <= CAP && fs.statSync(b).size <= CAP, { what: 'both logs capped' });

  // Renamed within the folder: the event names a file the capper does not know; every log is checked.
  const moved = path.join(dir, 'a.moved');
  fs.renameSync(a, moved);
  grow(moved, 10 * CAP);
  await waitFor(() => fs.statSync(moved).size <= CAP, { what: 'the renamed log capped' });

  // A run that ends leaves the folder watched for the next one.
  capper.unwatch(a);
  capper.unwatch(b);
  const c = path.join(dir, 'c.log');
  capper.watch(c, openLog(c));
  grow(c, 10 * CAP);
  await waitFor(() => fs.statSync(c).size <= CAP, { what: 'a later log in the folder capped' });
  capper.unwatch(c);

  // The folder removed and made again at the same path: its dead watch is dropped when the removal
  // event arrives, and the next log there is watched anew.
  fs.rmSync(dir, { recursive: true });
  await waitFor(() => capper.folderWatches === 0, { what: 'the dead folder watch dropped' });
  fs.mkdirSync(dir, { mode: 0o700 });
  const d = path.join(dir, 'd.log');
  capper.watch(d, openLog(d));
  assert.equal(capper.folderWatches, 1);
  grow(d, 10 * CAP);
  await waitFor(() => fs.statSync(d).size <= CAP, { what: 'a log in the folder made anew capped' });
});
