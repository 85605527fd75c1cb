import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { testSlotPool } from '../support/testSlotPool';
import { waitFor } from '../support/waitFor';

const QUEUED = 200;
const GRANTS = 50;

test('grants in a burst tell the runs behind them their places together, not once per grant, and the places are right', async (t) => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-positions-'));
  const slots = testSlotPool('cpu-analysis', path.join(root, 'cpu-analysis'), 1);
  const aborts = new AbortController();
  t.after(() => {
    aborts.abort(new Error('test over'));
    slots.close();
    fs.rmSync(root, { recursive: true, force: true });
  });
  // Real slot files: the first run holds the one slot, QUEUED runs wait behind it.
  let held = await slots.acquire('first', aborts.signal);
  const told = Array.from({ length: QUEUED }, () => [] as number[]);
  const grants = told.map((places, i) => {
    const granted = slots.acquire(`queued-${i}`, aborts.signal, (position) => places.push(position));
    granted.catch(() => {});
    return granted;
  });
  const calls = () => told.reduce((n, places) => n + places.length, 0);
  const onEntry = calls();
  assert.equal(onEntry, QUEUED, 'each run is told its place once as it queues');
  assert.deepEqual(
    told.map((places) => places[0]),
    told.map((_, i) => i + 1),
  );

  // GRANTS runs end one after the other, each slot going to the head of the queue.
  for (let n = 0; n < GRANTS; n++) {
    held.lock.closeOwnCopy();
    slots.released();
    held = await grants[n];
  }
  // Told one by one, the runs behind would have heard about 200 + 199 + … + 151 places: over 8,700.
  await waitFor(() => told.slice(GRANTS).every((places, i) => places[places.length - 1] === i + 1), {
    what: 'the runs still queued to learn their places',
  });
  const afterGrants = calls() - onEntry;
  assert.ok(afterGrants <= 3 * (QUEUED - GRANTS), `the grants told the queue ${afterGrants} places in all`);
  // A departure (a cancel) is told at once: the run behind it moves up before anything else happens.
  const cancel = new AbortController();
  const leaving = slots.acquire('leaving', cancel.signal);
  leaving.catch(() => {});
  const behind: number[] = [];
  const last = slots.acquire('behind', aborts.signal, (position) => behind.push(position));
  last.catch(() => {});
  assert.deepEqual(behind, [QUEUED - GRANTS + 2]);
  cancel.abort(new Error('cancelled'));
  assert.equal(behind[behind.length - 1], QUEUED - GRANTS + 1, 'moved up at the cancel itself');
  held.lock.closeOwnCopy();
});
