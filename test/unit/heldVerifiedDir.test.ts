import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { HeldVerifiedDir } from '../../agent/station/heldVerifiedDir';
import { VerifiedDir } from '../../agent/station/openInVerifiedDir';
import { privatePolicy } from '../../agent/station/stationPolicy';
import { UnsafeStationError } from '../../agent/station/unsafeStationError';
import { ensureVerifiedDir } from '../../agent/station/verifiedDir';
import { removeAtExit } from '../support/removeAtExit';

/** A pool folder in a fresh private folder, and a held handle on it that counts its opens. */
function heldPool() {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-helddir-'));
  removeAtExit(root);
  const dir = path.join(root, 'heavy-io');
  const policy = privatePolicy();
  let opens = 0;
  const held = new HeldVerifiedDir(() => {
    opens += 1;
    const opened = VerifiedDir.open(dir, policy);
    if (opened) return opened;
    ensureVerifiedDir(dir, policy, 'QUANTILICA_LOCK_DIR');
    return VerifiedDir.open(dir, policy)!;
  });
  return { dir, held, opens: () => opens };
}

test('a folder unchanged since its check is used again without opening it again, with its times as of now', (t) => {
  const { dir, held, opens } = heldPool();
  t.after(() => held.close());
  const first = held.get();
  assert.equal(opens(), 1);
  fs.writeFileSync(path.join(dir, 'slot_9.lock'), '', { mode: 0o600 });
  const again = held.get();
  assert.equal(again, first, 'the same descriptor');
  assert.equal(opens(), 1, 'no second open');
  assert.equal(again.stat.mtimeMs, fs.lstatSync(dir).mtimeMs, 'the folder as it is now (a listing kept by its times sees the new name)');
});

test('a folder renamed away and replaced is opened again: names are reached in the folder the path names now', (t) => {
  const { dir, held, opens } = heldPool();
  t.after(() => held.close());
  held.get();
  fs.renameSync(dir, `${dir}.old`);
  fs.mkdirSync(dir, { mode: 0o700 });
  const now = held.get();
  assert.equal(opens(), 2);
  assert.equal(now.stat.ino, fs.lstatSync(dir).ino);
  const made = now.openFile('slot_0.lock', { create: true, write: true })!;
  fs.closeSync(made.fd);
  assert.ok(fs.existsSync(path.join(dir, 'slot_0.lock')), 'made in the folder the path names now');
  assert.deepEqual(fs.readdirSync(`${dir}.old`), [], 'nothing made in the folder renamed away');
});

test('a held folder opened to other accounts is checked again and refused, not used', (t) => {
  const { dir, held, opens } = heldPool();
  t.after(() => held.close());
  held.get();
  fs.chmodSync(dir, 0o777);
  assert.throws(() => held.get(), UnsafeStationError);
  assert.equal(opens(), 2, 'the change sent it back to the full check');
  fs.chmodSync(dir, 0o700);
  held.get();
  assert.equal(opens(), 3);
});

test('a held folder replaced by a link is refused; a removed one is made again', (t) => {
  const { dir, held, opens } = heldPool();
  t.after(() => held.close());
  held.get();
  fs.rmSync(dir, { recursive: true });
  const made = held.get();
  assert.equal(opens(), 2);
  assert.ok(fs.lstatSync(dir).isDirectory());
  assert.equal(made.stat.ino, fs.lstatSync(dir).ino);
  fs.rmSync(dir, { recursive: true });
  const elsewhere = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-helddir-target-'));
  removeAtExit(elsewhere);
  fs.symlinkSync(elsewhere, dir);
  assert.throws(() => held.get(), UnsafeStationError);
});
