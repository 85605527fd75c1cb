import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { GroupCommit } from '../../agent/telemetry/groupCommit';
import { recordingGroupCommit } from '../support/recordingGroupCommit';

/** Resolves after `turns` turns of the event loop (each a setImmediate), the way the protocol library delivers requests. */
async function turns(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

test('during a burst, writers arriving over several event-loop turns share one write; none is acknowledged before it', async () => {
  // Wide margins, so a loaded machine's slow turns still fall inside the burst and its window.
  const { group, writes } = recordingGroupCommit<number>({ windowMs: 500, burstGapMs: 60_000 });
  // Outside a burst (no write yet): the first write goes on the next turn, alone.
  await group.add(0);
  assert.deepEqual(writes, [[0]]);
  // A burst: one writer per turn right after a write; they wait the window together.
  const acknowledged: number[] = [];
  const pending = [1, 2, 3, 4].map(async (i) => {
    await turns(i);
    await group.add(i);
    assert.ok(
      writes.some((w) => w.includes(i)),
      `writer ${i} is acknowledged only after the write holding it`,
    );
    acknowledged.push(i);
  });
  await turns(2);
  assert.deepEqual(acknowledged, [], 'no writer of the burst is acknowledged before its write');
  await Promise.all(pending);
  assert.deepEqual(writes, [[0], [1, 2, 3, 4]], 'the four writers of the burst shared one write');
});

test('flushNow writes what is queued at once and resolves its writers', async () => {
  const { group, writes } = recordingGroupCommit<string>();
  const a = group.add('a');
  const b = group.add('b');
  group.flushNow();
  assert.deepEqual(writes, [['a', 'b']]);
  await Promise.all([a, b]);
  await turns(2);
  assert.deepEqual(writes, [['a', 'b']], 'the cancelled scheduled write does not write again');
});

test('a write that is durable later (an fsync off the thread) answers its writers only then, and always in the order of the writes', async () => {
  const syncs: Array<() => void> = [];
  const group = new GroupCommit<string>(() => new Promise<void>((resolve) => syncs.push(resolve)), { windowMs: 0, burstGapMs: 0 });
  const answered: string[] = [];
  const a = group.add('a').then(() => answered.push('a'));
  group.flushNow();
  const b = group.add('b').then(() => answered.push('b'));
  group.flushNow();
  assert.equal(syncs.length, 2);
  await turns(2);
  assert.deepEqual(answered, [], 'nobody is answered before the sync of its write');
  // The second sync completes first: its writer still waits for the first write's.
  syncs[1]();
  await turns(2);
  assert.deepEqual(answered, []);
  syncs[0]();
  await Promise.all([a, b]);
  assert.deepEqual(answered, ['a', 'b']);
});
