import * as assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { lazyKernelFlocks } from '../../agent/flock/procLocks';
import type { SlotPool } from '../../agent/slots/slotPool';
import { testSlotPool } from '../support/testSlotPool';

const GRACE_MS = 3000;

/** A pool of two slots whose publications take a slot seen free as free for GRACE_MS. */
function pool(dir: string, onUnsure: () => void): SlotPool {
  return testSlotPool('network-light', dir, 2, { onUnsure, seenFreeGraceMs: GRACE_MS });
}

/** util-linux flock holding a file until its group is killed; resolves once it holds it. */
function holdWithFlock(file: string): Promise<import('node:child_process').ChildProcess> {
  return new Promise((resolve, reject) => {
    const child = spawn('flock', ['-n', file, '-c', 'echo held; exec sleep 60'], { stdio: ['ignore', 'pipe', 'inherit'], detached: true });
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`flock exited with ${code}`)));
    child.stdout.once('data', () => resolve(child));
  });
}

test(
  'a publication takes a slot seen free moments ago as free, a status asks the kernel, and the pool is pictured again after the grace',
  { timeout: 30000 },
  async (t) => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-grace-'));
    let unsure!: () => void;
    const recheck = new Promise<void>((resolve) => (unsure = resolve));
    const slots = pool(path.join(root, 'network-light'), () => unsure());
    t.after(() => {
      slots.close();
      fs.rmSync(root, { recursive: true, force: true });
    });
    const isOwn = () => false;
    // A status first: both slots free, as the kernel's table says; their files exist from now on.
    fs.writeFileSync(path.join(root, 'network-light', 'slot_1.lock'), '', { mode: 0o600 });
    const before = slots.state(isOwn);
    assert.deepEqual(
      before.map((s) => s.holder),
      [null, null],
    );
    const holder = await holdWithFlock(path.join(root, 'network-light', 'slot_1.lock'));
    t.after(() => process.kill(-holder.pid!, 'SIGKILL'));
    // Another process took slot 1 after it was seen free: a publication within the grace does not
    // read the kernel's table for it, a status does.
    let tableRead = false;
    const watched = () => {
      tableRead = true;
      return lazyKernelFlocks()();
    };
    const published = slots.state(isOwn, watched, true);
    assert.equal(published[1].holder, null, 'the publication within the grace pictures slot 1 free');
    assert.equal(tableRead, false, 'without reading the kernel lock table');
    const status = slots.state(isOwn);
    assert.equal(status[1].holder?.foreign, true, `a status finds the foreign holder: ${JSON.stringify(status[1])}`);
    // The grace over, the pool asks to be pictured again, and that picture finds the holder.
    await recheck;
    const again = slots.state(isOwn, lazyKernelFlocks(), true);
    assert.equal(again[1].holder?.foreign, true, `the picture after the grace finds the foreign holder: ${JSON.stringify(again[1])}`);
    assert.equal(again[0].holder, null);
  },
);
