import * as assert from 'node:assert/strict';
import type { Socket } from 'node:net';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { test, type TestContext } from 'node:test';
import { WebSocket, WebSocketServer } from 'ws';
import { SendFlow, type WriteTiming } from '../../agent/server/sendFlow';
import { wsText } from '../../shared/node/wsText';

const LIMITS = { capBytes: 1 << 24, highWaterBytes: 1 << 20, stallTimeoutMs: 60_000 };

/**
 * A real WebSocket pair on loopback; the server side sends through a SendFlow whose transport is the
 * connection's own TCP socket, with each uncork (each write that leaves) counted.
 */
async function pair(t: TestContext, timing: WriteTiming, limits = LIMITS) {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  t.after(() => server.close());
  await new Promise<void>((resolve) => server.once('listening', resolve));
  const port = (server.address() as { port: number }).port;
  const accepted = new Promise<WebSocket>((resolve) => server.once('connection', resolve));
  const client = new WebSocket(`ws://127.0.0.1:${port}/`);
  t.after(() => client.terminate());
  const received: string[] = [];
  const arrivals: Array<() => void> = [];
  client.on('message', (data) => {
    received.push(wsText(data));
    for (const wake of arrivals.splice(0)) wake();
  });
  const ws = await accepted;
  const socket = (ws as unknown as { _socket: Socket })._socket;
  let uncorks = 0;
  const transport = {
    cork: () => socket.cork(),
    uncork: () => {
      uncorks += 1;
      socket.uncork();
    },
  };
  const drops: string[] = [];
  const flow = new SendFlow(ws, limits, (reason) => drops.push(reason), transport, timing);
  t.after(() => flow.dispose());
  const receivedCount = async (n: number) => {
    while (received.length < n) await new Promise<void>((resolve) => arrivals.push(resolve));
  };
  return { flow, received, receivedCount, uncorks: () => uncorks, drops };
}

test('a frame sent after a quiet spell leaves at the end of its tick', async (t) => {
  const { flow, received, receivedCount, uncorks, drops } = await pair(t, { windowMs: 60_000, burstGapMs: 0 });
  void flow.send('first');
  void flow.send('second, same tick');
  assert.equal(uncorks(), 0, 'corked while the tick lasts');
  await nextTurn();
  assert.equal(uncorks(), 1, 'one write for the tick, before the next turn of the loop (no window outside a burst)');
  await receivedCount(2);
  assert.deepEqual(received, ['first', 'second, same tick']);
  assert.deepEqual(drops, []);
});

test('while a burst lasts, the frames of many turns leave in one write at the end of the window', async (t) => {
  // A window far longer than the sends take, so the count does not depend on the machine's speed.
  const { flow, received, receivedCount, uncorks, drops } = await pair(t, { windowMs: 300, burstGapMs: 60_000 });
  // The first write after a quiet spell: at once.
  void flow.send('lead');
  await nextTurn();
  assert.equal(uncorks(), 1);
  await receivedCount(1);
  const frames = Array.from({ length: 20 }, (_, i) => `change ${i}`);
  for (const frame of frames) {
    void flow.send(frame);
    await nextTurn();
  }
  assert.equal(uncorks(), 1, 'twenty turns of sends, no write yet: they wait for the window');
  await receivedCount(21);
  assert.equal(uncorks(), 2, 'all twenty left in one write');
  assert.deepEqual(received, ['lead', ...frames], 'in the order they were sent');
  assert.deepEqual(drops, []);
});

test(
  'a window that holds a quarter of the high-water mark lets it go at once: a flood is not a client that stopped reading',
  { timeout: 20_000 },
  async (t) => {
    // A window that would never end by itself, and a cap a window's worth of frames would pass.
    const limits = { capBytes: 64 * 1024, highWaterBytes: 32 * 1024, stallTimeoutMs: 60_000 };
    const { flow, received, receivedCount, uncorks, drops } = await pair(t, { windowMs: 600_000, burstGapMs: 600_000 }, limits);
    void flow.send('lead');
    await nextTurn();
    await receivedCount(1);
    const frames = Array.from({ length: 200 }, (_, i) => `${i} ${'x'.repeat(1000)}`);
    for (const frame of frames) flow.send(frame).catch(() => undefined);
    // All but the last window's few frames leave without the window's end.
    await receivedCount(1 + 150);
    assert.deepEqual(drops, [], 'the client reading all along is not dropped');
    assert.ok(uncorks() >= 10, `the window let its frames go as they piled up (${uncorks()} writes)`);
    assert.deepEqual(received.slice(1, 151), frames.slice(0, 150), 'in order');
  },
);

test('frames held by their tick alone that make a quarter of the high-water mark leave at once as well', { timeout: 20_000 }, async (t) => {
  // Never a burst: every cork is the tick's. One tick sends more than the cap.
  const limits = { capBytes: 64 * 1024, highWaterBytes: 32 * 1024, stallTimeoutMs: 60_000 };
  const { flow, received, receivedCount, uncorks, drops } = await pair(t, { windowMs: 600_000, burstGapMs: 0 }, limits);
  const frames = Array.from({ length: 200 }, (_, i) => `${i} ${'x'.repeat(1000)}`);
  for (const frame of frames) flow.send(frame).catch(() => undefined);
  assert.ok(uncorks() >= 10, `the tick's frames left as they piled up, before the tick ended (${uncorks()} writes)`);
  assert.deepEqual(drops, [], 'a tick that sends much is not a client that stopped reading');
  await receivedCount(200);
  assert.deepEqual(received, frames, 'all of them, in order');
});
