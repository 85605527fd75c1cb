import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import * as v8 from 'node:v8';
import { BurstHeap } from '../../agent/memory/burstHeap';
import { memoryLogger } from '../support/memoryLogger';
import { waitFor } from '../support/waitFor';

/** The new space's size now, in MB. */
function newSpaceMb(): number {
  const space = v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space');
  assert.ok(space, 'V8 reports a new space');
  return space.space_size / 1024 / 1024;
}

/** Short-lived garbage at a burst's rate: without the flag V8 grows its semi-spaces to 16 MB each. */
function churn(mb: number): number {
  let kept = 0;
  for (let i = 0; i < mb * 1024; i++) {
    const chunk = { id: i, text: `run-${i}`.repeat(40), list: [i, i + 1, i + 2] };
    kept += chunk.list.length;
  }
  return kept;
}

test('after install, a burst of short-lived objects leaves the young generation at its starting size', () => {
  const heap = BurstHeap.install(memoryLogger(), () => {});
  assert.ok(heap, 'V8 takes the heap settings');
  churn(400);
  assert.ok(newSpaceMb() <= 4, `new space ${newSpaceMb().toFixed(1)} MB after the churn (16 MB semi-spaces without the setting)`);
  assert.equal((globalThis as { gc?: unknown }).gc, undefined, "the agent's own global gets no gc()");
  heap.close();
});

test('once the queue is empty after a burst of runs, the heap is collected (not after a few runs)', { timeout: 20000 }, async () => {
  const logger = memoryLogger();
  let released = 0;
  const heap = BurstHeap.install(logger, () => (released += 1));
  assert.ok(heap);
  const collections = () => logger.records.filter((r) => r.msg === 'collected the heap after a burst');
  for (let i = 0; i < 5; i++) heap.runEnded();
  heap.idle();
  for (let i = 0; i < 200; i++) heap.runEnded();
  // A run queued before the quiet second is over: nothing is collected while it is in flight.
  heap.idle();
  heap.busy();
  heap.idle();
  const [collected] = await waitFor(() => collections().length > 0 && collections(), {
    what: 'the collection after the burst',
    timeoutMs: 10000,
  });
  assert.equal((collected.obj as { runs: number }).runs, 205, 'one collection for the runs since the last');
  assert.equal(released, 1, "the databases' caches are given back with the collection");
  heap.close();
});

test(
  'runs that come back during the collection put it off: nothing is released until a quiet second after them',
  { timeout: 20000 },
  async () => {
    const logger = memoryLogger();
    let released = 0;
    let comeBack = true;
    // The collection's start is where the runs come back (the collection then falls to gc(), which is synchronous).
    const heap: BurstHeap | null = BurstHeap.install(
      logger,
      () => (released += 1),
      () => {
        if (comeBack) heap?.busy();
        comeBack = false;
        return false;
      },
    );
    assert.ok(heap);
    const collections = () => logger.records.filter((r) => r.msg === 'collected the heap after a burst');
    for (let i = 0; i < 150; i++) heap.runEnded();
    heap.idle();
    await waitFor(() => !comeBack, { what: 'the first collection to start', timeoutMs: 10000 });
    assert.equal(released, 0, 'nothing released while runs are back');
    assert.equal(collections().length, 0);
    for (let i = 0; i < 10; i++) heap.runEnded();
    heap.idle();
    const [collected] = await waitFor(() => collections().length > 0 && collections(), {
      what: 'the collection after the quiet second',
      timeoutMs: 10000,
    });
    assert.equal((collected.obj as { runs: number; by: string }).runs, 160, 'the runs of both bursts');
    assert.equal((collected.obj as { by: string }).by, 'gc', 'V8 did not start one: gc() collected');
    assert.equal(released, 1);
    heap.close();
  },
);
