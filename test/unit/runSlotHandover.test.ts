import assert from 'node:assert/strict';
import { test } from 'node:test';
import { managerBed, settle } from '../support/runFakes';
import { waitFor } from '../support/waitFor';

test("a run's slot goes to the next run at its end, and the next spawn waits for that end to be durable", async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  const first = await bed.running(0);
  const second = await bed.pastGate();
  bed.journal.hold();

  bed.spawner.of(first.runId).exit({ exitCode: 0, signal: null });
  await waitFor(() => bed.slots.releasedCount === 1, { what: "the first run's slot handed back" });
  assert.ok(!bed.journal.statesOf(first.runId).includes('completed'), 'handed back before its end is committed');

  bed.slots.grantNext(0);
  await settle();
  await settle();
  assert.equal(bed.spawner.processes.length, 1, 'no spawn while the end before it and its own intent are pending');

  bed.journal.release();
  await waitFor(() => bed.spawner.processes.length === 2, { what: 'the second spawn' });
  const order = bed.journal.commits.map(
    (c) => `${c.run.runId === first.runId ? 'first' : 'second'}:${c.run.status}(${c.run.reason ?? ''})`,
  );
  assert.ok(
    order.indexOf('first:completed()') < order.indexOf('second:waiting(starting)'),
    `the first run's end is committed before the second's intent: ${order.join(', ')}`,
  );
  assert.equal(bed.spawner.of(second.runId).opts.env.QUANTILICA_SLOT, '0');
});
