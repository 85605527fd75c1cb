// Unauthenticated clients cannot fill the agent's log or its descriptor table, and
// the agent's own log (stderr on a file, as the extension starts it) is capped and rotated.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as net from 'node:net';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { WebSocket } from 'ws';
import { connectAgent } from '../../agent/client/agentClient';
import { readConnectionFile } from '../../shared/node/connectionFile';
import { AGENT_JS, makeTestEnv, readyAgent, startAgent, type TestEnv } from '../support/harness';
import { waitFor } from '../support/waitFor';

const stations: TestEnv[] = [];
after(() => {
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});
const connectionFile = (s: TestEnv) => path.join(s.home, '.quantilica', 'agent.json');

/** One authenticated connection with the bearer token, opened and closed. */
async function bearerRoundTrip(port: number, token: string): Promise<void> {
  const ws = new WebSocket(`ws://127.0.0.1:${port}/`, { headers: { Authorization: `Bearer ${token}` } });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  await new Promise<void>((resolve) => {
    ws.once('close', () => resolve());
    ws.close(1000);
  });
}

function upgrade(port: number, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve) => {
    const req = http.request({
      host: '127.0.0.1',
      port,
      headers: {
        Connection: 'Upgrade',
        Upgrade: 'websocket',
        'Sec-WebSocket-Version': '13',
        'Sec-WebSocket-Key': 'dGhlIHNhbXBsZSBub25jZQ==',
        ...headers,
      },
    });
    req.on('response', (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('upgrade', (_res, socket) => {
      socket.destroy();
      resolve(101);
    });
    req.on('error', () => resolve(0));
    req.end();
  });
}

test('20,000 refused upgrades with a 15 kB Origin leave a few lines of log, counted in aggregate', async () => {
  const s = makeTestEnv(null, { QUANTILICA_LOG_LEVEL: 'info' });
  stations.push(s);
  const agent = await startAgent(s);
  const { port } = await readConnectionFile(connectionFile(s));
  const origin = `https://${'x'.repeat(15 * 1024)}.example`;
  const total = 20_000;
  for (let sent = 0; sent < total; sent += 100) {
    const statuses = await Promise.all(Array.from({ length: 100 }, () => upgrade(port, { Origin: origin, Host: `127.0.0.1:${port}` })));
    // A refusal is 403, or the connection closed at accept while 64 others are pending.
    for (const status of statuses) assert.ok(status === 403 || status === 0, `status ${status}`);
  }
  const client = await connectAgent(connectionFile(s), { client: 'after-the-flood' });
  assert.ok((await client.getSnapshot()).pools.length > 0, 'the agent still serves its own clients');
  await client.close();
  const exited = new Promise((resolve) => agent.child.once('exit', resolve));
  agent.child.kill('SIGTERM');
  await exited;
  const log = agent.stderr();
  assert.ok(log.length < 20_000, `the log stayed small: ${log.length} bytes`);
  assert.equal(log.includes('xxxxxxxxxx'), false, 'no header value reaches the log');
  const lines = log
    .split('\n')
    .filter((l) => l.includes('refused connections'))
    .map((l) => JSON.parse(l) as { refused: Record<string, number> });
  const counted = lines.reduce((sum, l) => sum + Object.values(l.refused).reduce((a, b) => a + b, 0), 0);
  assert.equal(counted, total, `every refusal is counted: ${JSON.stringify(lines.map((l) => l.refused))}`);
});

test("thousands of idle connections before authentication do not exhaust the agent's descriptors", async () => {
  const s = makeTestEnv(null);
  stations.push(s);
  const agent = await startAgent(s);
  const pid = agent.child.pid ?? 0;
  const { port, token } = await readConnectionFile(connectionFile(s));
  const sockets: net.Socket[] = [];
  try {
    for (let i = 0; i < 3000; i++) {
      const socket = net.connect(port, '127.0.0.1');
      socket.on('error', () => undefined);
      sockets.push(socket);
    }
    await Promise.all(
      sockets.map(
        (socket) =>
          new Promise((resolve) => {
            socket.once('connect', resolve);
            socket.once('close', resolve);
          }),
      ),
    );
    // Each accepted connection beyond the cap is closed at once: the agent's descriptors stay bounded.
    const fds = await waitFor(
      () => {
        const n = fs.readdirSync(`/proc/${pid}/fd`).length;
        return n < 200 ? n : false;
      },
      { what: "the agent's descriptors to stay bounded", timeoutMs: 20_000 },
    );
    assert.ok(fds < 200, `${fds} descriptors`);
    // The idle ones are closed after the short upgrade timeout; then a new client gets in.
    await waitFor(
      async () => {
        await bearerRoundTrip(port, token);
        return true;
      },
      { what: 'a new client to connect', timeoutMs: 30_000, intervalMs: 500 },
    );
  } finally {
    for (const socket of sockets) socket.destroy();
    const exited = new Promise((resolve) => agent.child.once('exit', resolve));
    agent.child.kill('SIGTERM');
    await exited;
  }
});

test("the agent's log on a file (as the extension starts it) is capped and rotated", async () => {
  const s = makeTestEnv(null, { QUANTILICA_LOG_LEVEL: 'debug', QUANTILICA_AGENT_LOG_CAP_MB: '0.05' });
  stations.push(s);
  const logFile = path.join(s.root, 'agent.log');
  const out = fs.openSync(logFile, 'a', 0o600);
  const child = spawn(process.execPath, [AGENT_JS, 'agent'], { env: s.env, stdio: ['ignore', 'pipe', out] });
  fs.closeSync(out);
  try {
    await readyAgent(child, () => fs.readFileSync(logFile, 'utf8'));
    // Each connection logs a few lines: enough of them to pass the cap several times over.
    const { port, token } = await readConnectionFile(connectionFile(s));
    for (let i = 0; i < 400; i++) await bearerRoundTrip(port, token);
    await waitFor(() => fs.existsSync(`${logFile}.1`), { what: 'the rotated log', timeoutMs: 20_000, intervalMs: 100 });
    await waitFor(() => fs.statSync(logFile).size <= 50 * 1024 * 2, {
      what: 'the log to be back under its cap',
      timeoutMs: 20_000,
      intervalMs: 100,
    });
    assert.equal(fs.statSync(`${logFile}.1`).mode & 0o077, 0, 'the rotated log is private');
    assert.match(fs.readFileSync(logFile, 'utf8'), /log rotated/);
  } finally {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  }
});
