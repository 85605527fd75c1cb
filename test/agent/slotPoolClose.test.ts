import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { testSlotPool } from '../support/testSlotPool';

/** This process's descriptors that are open on `dir` itself (not on files inside it). */
function descriptorsOn(dir: string): string[] {
  const real = fs.realpathSync(dir);
  return fs.readdirSync('/proc/self/fd').filter((fd) => {
    try {
      return fs.readlinkSync(`/proc/self/fd/${fd}`) === real;
    } catch {
      return false; // the descriptor readdir itself used, closed by now
    }
  });
}

test('a pool keeps its folder open between grants and closes it when the pool closes', async (t) => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-pool-close-'));
  t.after(() => fs.rmSync(root, { recursive: true, force: true }));
  const dir = path.join(root, 'heavy-io');
  const slots = testSlotPool('heavy-io', dir, 2);
  const aborts = new AbortController();
  // Also when an assertion fails before the pool's own close (a second close does nothing).
  t.after(() => {
    aborts.abort(new Error('test over'));
    slots.close();
  });
  for (let n = 0; n < 3; n++) {
    const grant = await slots.acquire(`run-${n}`, aborts.signal);
    grant.lock.closeOwnCopy();
    slots.released();
  }
  assert.equal(descriptorsOn(dir).length, 1, 'one descriptor on the folder, held across the three grants');
  slots.close();
  assert.deepEqual(descriptorsOn(dir), [], 'none once the pool is closed');
});
