import * as assert from 'node:assert/strict';
import * as net from 'node:net';
import { test } from 'node:test';
import { LoopbackPeers } from '../../agent/server/loopbackPeers';

/** A real loopback connection (IPv4, or a dual-stack IPv6 client); the server's view of each accepted socket. */
async function accepted(
  family: 4 | 6,
): Promise<{ ends: { peerAddress: string; peerPort: number; localAddress: string; localPort: number }; close: () => void }> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, family === 4 ? '127.0.0.1' : '::', resolve));
  const { port } = server.address() as net.AddressInfo;
  const got = new Promise<net.Socket>((resolve) => server.once('connection', resolve));
  const client = net.connect({ port, host: family === 4 ? '127.0.0.1' : '::ffff:127.0.0.1' });
  const socket = await got;
  const ends = {
    peerAddress: socket.remoteAddress!,
    peerPort: socket.remotePort!,
    localAddress: socket.localAddress!,
    localPort: socket.localPort!,
  };
  return {
    ends,
    close: () => {
      client.destroy();
      socket.destroy();
      server.close();
    },
  };
}

test("the account of a loopback peer is its socket's owner in /proc/net/tcp", async () => {
  const { ends, close } = await accepted(4);
  try {
    assert.equal(new LoopbackPeers().uidOf(ends, performance.now()), process.getuid!());
  } finally {
    close();
  }
});

test('a dual-stack client (v4-mapped, in /proc/net/tcp6) is found too', async () => {
  const { ends, close } = await accepted(6);
  try {
    assert.match(ends.peerAddress, /^::ffff:127\.0\.0\.1$/);
    assert.equal(new LoopbackPeers().uidOf(ends, performance.now()), process.getuid!());
  } finally {
    close();
  }
});

test('a peer that is in no table (gone) is null, never our own account', async () => {
  const { ends, close } = await accepted(4);
  close();
  const peers = new LoopbackPeers();
  // A port nobody holds on this pair of ends.
  assert.equal(peers.uidOf({ ...ends, peerPort: ends.localPort === 1 ? 2 : 1 }, performance.now()), null);
  assert.equal(peers.uidOf({ ...ends, peerAddress: 'not-an-address' }, performance.now()), null);
});
