import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { PublishThrottle } from '../../agent/state/publishThrottle';
import { ManualClock } from '../support/manualClock';

/** A throttle on a manual clock, recording the elapsed time of each publication. */
function throttled(costMs = 1) {
  const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
  const start = clock.now().getTime();
  const elapsed = () => clock.now().getTime() - start;
  const published: number[] = [];
  const throttle = new PublishThrottle(
    () => {
      published.push(elapsed());
      return costMs;
    },
    { elapsed, setTimer: (fn, ms) => clock.setTimer(fn, ms) },
    { windowMs: 50, costShare: 10 },
  );
  return { clock, throttle, published };
}

test('the first change after a quiet window is published at once (the next turn), not after a window', () => {
  const { clock, throttle, published } = throttled();
  throttle.changed();
  clock.advance(0);
  assert.deepEqual(published, [0]);
  // Quiet for longer than the window: the next change goes out at once too.
  clock.advance(80);
  throttle.changed();
  clock.advance(0);
  assert.deepEqual(published, [0, 80]);
});

test('changes in the same turn are one publication', () => {
  const { clock, throttle, published } = throttled();
  for (let i = 0; i < 5; i++) throttle.changed();
  clock.advance(0);
  assert.deepEqual(published, [0]);
});

test('a burst is coalesced: one leading publication, then at most one per window while changes keep coming', () => {
  const { clock, throttle, published } = throttled();
  // A change every 5 ms for 300 ms.
  for (let t = 0; t < 300; t += 5) {
    throttle.changed();
    clock.advance(5);
  }
  clock.advance(200);
  assert.equal(published[0], 0, 'the first change went out at once');
  assert.deepEqual(
    published,
    [0, 50, 100, 150, 200, 250, 300],
    'one trailing publication per 50 ms window, the last at the end of the burst',
  );
  // Nothing left pending once the burst is over.
  assert.equal(clock.timers(), 0);
});

test('a change inside the window waits only for the rest of the window', () => {
  const { clock, throttle, published } = throttled();
  throttle.changed();
  clock.advance(30);
  throttle.changed();
  clock.advance(19);
  assert.deepEqual(published, [0], 'coalesced until the window ends');
  clock.advance(1);
  assert.deepEqual(published, [0, 50]);
});

test('an expensive publication widens the window to keep its share of the thread', () => {
  const { clock, throttle, published } = throttled(20);
  throttle.changed();
  clock.advance(10);
  throttle.changed();
  clock.advance(500);
  assert.deepEqual(published, [0, 200], 'ten times the 20 ms cost');
});

test('cancel drops a pending publication', () => {
  const { clock, throttle, published } = throttled();
  throttle.changed();
  clock.advance(0);
  throttle.changed();
  throttle.cancel();
  clock.advance(500);
  assert.deepEqual(published, [0]);
});
