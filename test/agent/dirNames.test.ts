// A lock folder's listing is kept while the folder is unchanged, and listed again once it changed or
// while it changed too recently to tell a later change from its times.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { DirNames, SETTLED_MS } from '../../agent/slots/dirNames';
import { VerifiedDir } from '../../agent/station/openInVerifiedDir';
import { privatePolicy } from '../../agent/station/stationPolicy';

function folder(t: { after(fn: () => void): void }): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-names-'));
  fs.chmodSync(dir, 0o700);
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  fs.writeFileSync(path.join(dir, 'slot_0.lock'), '', { mode: 0o600 });
  return dir;
}

/** The folder opened as the pool opens it, with its listings counted. */
function opened(dir: string, listings: { n: number }) {
  const verified = VerifiedDir.open(dir, privatePolicy())!;
  return {
    stat: verified.stat,
    names: () => {
      listings.n += 1;
      try {
        return verified.names();
      } finally {
        verified.close();
      }
    },
  };
}

test('a settled folder is listed once while its times stay; a change lists it again', (t) => {
  const dir = folder(t);
  const names = new DirNames();
  const listings = { n: 0 };
  const later = Date.now() + 2 * SETTLED_MS;
  assert.deepEqual([...names.of(opened(dir, listings), later)], ['slot_0.lock']);
  assert.deepEqual([...names.of(opened(dir, listings), later)], ['slot_0.lock']);
  assert.equal(listings.n, 1);
  fs.writeFileSync(path.join(dir, 'slot_7.lock'), '', { mode: 0o600 });
  // Its own times, whatever tick of the file clock the write fell in.
  fs.utimesSync(dir, new Date(2001, 0, 1), new Date(2001, 0, 1));
  assert.deepEqual([...names.of(opened(dir, listings), later)].sort(), ['slot_0.lock', 'slot_7.lock']);
  assert.equal(listings.n, 2);
});

test('a folder changed within the settle time is listed at every call', (t) => {
  const dir = folder(t);
  const names = new DirNames();
  const listings = { n: 0 };
  names.of(opened(dir, listings));
  // A name added within the same tick would leave the folder's times as they were: still seen.
  fs.writeFileSync(path.join(dir, 'slot_5.lock'), '', { mode: 0o600 });
  assert.deepEqual([...names.of(opened(dir, listings))].sort(), ['slot_0.lock', 'slot_5.lock']);
  assert.equal(listings.n, 2);
});

test('another folder at the same path is listed afresh', (t) => {
  const dir = folder(t);
  const names = new DirNames();
  const listings = { n: 0 };
  const later = Date.now() + 2 * SETTLED_MS;
  names.of(opened(dir, listings), later);
  fs.rmSync(dir, { recursive: true });
  fs.mkdirSync(dir, { mode: 0o700 });
  fs.writeFileSync(path.join(dir, 'slot_9.lock'), '', { mode: 0o600 });
  // The inode number may be reused at once: the new folder's own times tell it apart.
  fs.utimesSync(dir, new Date(2002, 0, 1), new Date(2002, 0, 1));
  assert.deepEqual([...names.of(opened(dir, listings), later)], ['slot_9.lock']);
  assert.equal(listings.n, 2);
});
