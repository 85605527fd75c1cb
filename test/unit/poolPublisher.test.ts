import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Change, PoolState } from '../../shared/protocol';
import { POOL_PUBLISH_WINDOW_MS, PoolPublisher } from '../../agent/state/poolPublisher';
import { ManualClock } from '../support/manualClock';

/** A publisher on a manual clock over a hub that records what it is given, and a record of each reading asked. */
function publisher(listening = true) {
  const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
  const start = clock.now().getTime();
  const hub = {
    listening,
    published: [] as Change[],
    hasListeners() {
      return this.listening;
    },
    publish(change: Change) {
      this.published.push(change);
    },
  };
  const readings: string[][] = [];
  const statesOf = (names: string[]): PoolState[] => {
    readings.push(names);
    return names.filter((n) => n !== 'gone').map((name) => ({ name, size: 1, used: 0, waiting: 0, waitTimeoutSeconds: 60, slots: [] }));
  };
  const pools = new PoolPublisher(hub, statesOf, {
    elapsed: () => clock.now().getTime() - start,
    setTimer: (fn, ms) => clock.setTimer(fn, ms),
  });
  const names = () => hub.published.map((c) => (c.kind === 'pool' ? c.pool.name : c.kind));
  return { clock, hub, pools, readings, names };
}

test('pools changed in one turn are read once, together, and each published', () => {
  const { clock, pools, readings, names } = publisher();
  pools.changed('heavy-io');
  pools.changed('cpu-analysis');
  pools.changed('heavy-io');
  clock.advance(0);
  assert.deepEqual(readings, [['heavy-io', 'cpu-analysis']]);
  assert.deepEqual(names(), ['heavy-io', 'cpu-analysis']);
});

test('changes inside the window after a publication wait for one trailing publication', () => {
  const { clock, pools, readings } = publisher();
  pools.changed('heavy-io');
  clock.advance(0);
  pools.changed('network-light');
  clock.advance(POOL_PUBLISH_WINDOW_MS - 1);
  assert.equal(readings.length, 1, 'not before the window ends');
  clock.advance(1);
  assert.deepEqual(readings, [['heavy-io'], ['network-light']]);
});

test('with nobody listening nothing is read', () => {
  const { clock, hub, pools, readings } = publisher(false);
  pools.changed('heavy-io');
  clock.advance(100);
  assert.deepEqual(readings, []);
  // A listener that leaves before the pending publication: the reading is skipped too.
  hub.listening = true;
  pools.changed('heavy-io');
  hub.listening = false;
  clock.advance(100);
  assert.deepEqual(readings, []);
  assert.deepEqual(hub.published, []);
});

test('a pool the reading no longer finds is left out; after close nothing more is published', () => {
  const { clock, pools, names } = publisher();
  pools.changed('gone');
  pools.changed('heavy-io');
  clock.advance(0);
  assert.deepEqual(names(), ['heavy-io']);
  pools.changed('cpu-analysis');
  pools.close();
  pools.changed('network-light');
  clock.advance(1000);
  assert.deepEqual(names(), ['heavy-io']);
});
