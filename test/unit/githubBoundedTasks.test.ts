import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runBounded, type TaskOutcome } from '../../agent/github/boundedTasks';
import { GITHUB_SYNC_CONCURRENCY, validateConcurrency } from '../../agent/github/concurrency';

test('the ceiling is declared once (5) and refused when the pool minus its headroom cannot carry it', () => {
  assert.equal(GITHUB_SYNC_CONCURRENCY, 5);
  validateConcurrency(5, 10, 'postgres');
  assert.throws(() => validateConcurrency(6, 10, 'postgres'), /exceeds the database pool \(10\) minus its headroom \(5\)/);
  assert.throws(() => validateConcurrency(0, 10, 'sqlite'), /from 1 to 50/);
  validateConcurrency(8, 1, 'sqlite');
});

test('at most N at once, outcomes in completion order, a throwing task is an outcome and its siblings go on', async () => {
  let live = 0;
  let peak = 0;
  const order: Array<[number, TaskOutcome<number>['kind']]> = [];
  // Released in reverse order, so completion order differs from start order.
  const gates = new Map<number, () => void>();
  const items = [1, 2, 3, 4, 5, 6, 7];
  const done = runBounded(
    items,
    { concurrency: 3, timeoutMs: 10_000, mayStart: () => true },
    async (n) => {
      live += 1;
      peak = Math.max(peak, live);
      await new Promise<void>((resolve) => gates.set(n, resolve));
      live -= 1;
      if (n === 2) throw new Error('boom');
      return n * 10;
    },
    (n, outcome) => {
      order.push([n, outcome.kind]);
    },
  );
  for (let released = 0; released < items.length;) {
    await new Promise((resolve) => setImmediate(resolve));
    const open = [...gates.keys()].sort((a, b) => b - a)[0];
    if (open === undefined) continue;
    gates.get(open)!();
    gates.delete(open);
    released += 1;
  }
  await done;
  assert.equal(peak, 3);
  assert.deepEqual(order.map(([n]) => n).sort(), items);
  assert.notDeepEqual(
    order.map(([n]) => n),
    items,
  );
  assert.deepEqual(
    order.find(([n]) => n === 2),
    [2, 'failed'],
  );
  assert.equal(order.filter(([, k]) => k === 'done').length, 6);
});

test('stop: when mayStart turns false, started tasks finish and the rest are reported not started', async () => {
  let stop = false;
  const outcomes = new Map<number, string>();
  await runBounded(
    [1, 2, 3, 4, 5, 6],
    { concurrency: 2, timeoutMs: 10_000, mayStart: () => !stop },
    async (n) => {
      if (n === 2)
        stop = true; // task 2 meets the rate limit while task 1 is still in flight
      else await new Promise((resolve) => setTimeout(resolve, 20));
      return n;
    },
    (n, outcome) => {
      outcomes.set(n, outcome.kind);
    },
  );
  assert.deepEqual(
    [...outcomes.entries()].sort((a, b) => a[0] - b[0]),
    [
      [1, 'done'],
      [2, 'done'],
      [3, 'not-started'],
      [4, 'not-started'],
      [5, 'not-started'],
      [6, 'not-started'],
    ],
  );
});

test('a task past its timeout is aborted and reported timed out', async () => {
  let aborted = false;
  const outcomes: Array<TaskOutcome<number>> = [];
  await runBounded(
    [1],
    { concurrency: 1, timeoutMs: 50, mayStart: () => true },
    (_n, signal) =>
      new Promise<number>((_resolve, reject) => {
        signal.addEventListener('abort', () => {
          aborted = true;
          reject(new Error('aborted'));
        });
      }),
    (_n, o) => {
      outcomes.push(o);
    },
  );
  assert.equal(aborted, true);
  assert.deepEqual(
    outcomes.map((o) => ({ kind: o.kind, timedOut: o.kind === 'failed' && o.timedOut })),
    [{ kind: 'failed', timedOut: true }],
  );
});
