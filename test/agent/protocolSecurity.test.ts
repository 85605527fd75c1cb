// Bad input on the agent's socket, against the real agent (`quantilica agent`, a real process):
// each case gets a clear refusal or error, memory stays bounded and other clients are still served.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import { WebSocket } from 'ws';
import { connectAgent, type AgentClient } from '../../agent/client/agentClient';
import { readConnectionFile } from '../../shared/node/connectionFile';
import { ErrorCodes, GetSnapshot, Hello, ListRuns, type ConnectionInfo } from '../../shared/protocol';
import { makeTestEnv, startAgent, type TestEnv } from '../support/harness';
import { waitFor } from '../support/waitFor';

let env: TestEnv;
let agent: { child: ChildProcess; stderr: () => string };
let info: ConnectionInfo;
let watcher: AgentClient;
const connectionFile = () => path.join(env.home, '.quantilica', 'agent.json');

before(async () => {
  env = makeTestEnv(null, {
    QUANTILICA_SCHEDULE_CATCH_UP: 'false',
    QUANTILICA_DEMO_SECONDS: '600',
    QUANTILICA_DEMO_RATE_MB: '0',
    QUANTILICA_LOG_LEVEL: 'info',
  });
  agent = await startAgent(env);
  info = await readConnectionFile(connectionFile());
  // A well-behaved client connected through every test: it must keep being served.
  watcher = await connectAgent(connectionFile(), { client: 'watcher' });
});

after(async () => {
  await watcher.close();
  const exited = new Promise((resolve) => agent.child.once('exit', resolve));
  agent.child.kill('SIGTERM');
  await exited;
  fs.rmSync(env.root, { recursive: true, force: true });
});

async function stillServed(): Promise<void> {
  const snapshot = await watcher.getSnapshot();
  assert.ok(snapshot.pools.length > 0);
}

test('an upgrade without a token is refused with 401 and says how to authenticate', async () => {
  const answer = await tryUpgrade({});
  assert.equal(answer.status, 401);
  assert.match(answer.body, /no token; send "Authorization: Bearer <token>"/);
  await stillServed();
});

test('a wrong token is refused with 401', async () => {
  const answer = await tryUpgrade({ Authorization: `Bearer ${crypto.randomBytes(32).toString('base64url')}` });
  assert.equal(answer.status, 401);
  assert.match(answer.body, /wrong token/);
  const short = await tryUpgrade({ Authorization: 'Bearer x' });
  assert.equal(short.status, 401, 'a token of another length is compared just the same');
});

test('a browser Origin is refused with 403 even with the right token', async () => {
  const answer = await tryUpgrade({ Authorization: `Bearer ${info.token}`, Origin: 'https://evil.example' });
  assert.equal(answer.status, 403);
  assert.match(answer.body, /requests from a browser \(an Origin header\)/);
  assert.doesNotMatch(answer.body, /evil\.example/, 'a refusal never echoes a header value');
});

test('a foreign Host (DNS rebinding) is refused with 403 even with the right token', async () => {
  const answer = await tryUpgrade({ Authorization: `Bearer ${info.token}`, Host: `evil.example:${info.port}` });
  assert.equal(answer.status, 403);
  assert.match(answer.body, /the Host header is not the agent's loopback address/);
  assert.doesNotMatch(answer.body, /evil\.example/, 'a refusal never echoes a header value');
  assert.equal((await tryUpgrade({ Authorization: `Bearer ${info.token}`, Host: `localhost:${info.port}` })).status, 101);
});

test('a frame over 1 MiB closes the connection with 1009', async () => {
  const ws = await rawSocket();
  const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
  ws.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: ListRuns.method, params: { pad: 'x'.repeat(1024 * 1024 + 10) } }));
  assert.equal(await closed, 1009);
  await stillServed();
});

test('malformed JSON, an unknown method and invalid params each get their JSON-RPC error', async () => {
  const ws = await rawSocket();
  try {
    const rpc = answers(ws);
    ws.send('{"jsonrpc": "2.0", "id": 1, "method": ');
    const parse = await rpc.next();
    assert.equal(parse.id, null);
    assert.equal(parse.error?.code, -32700);
    assert.match(parse.error?.message ?? '', /not valid JSON/);

    ws.send(JSON.stringify([{ jsonrpc: '2.0', id: 2, method: Hello.method }]));
    assert.match((await rpc.next()).error?.message ?? '', /batches are not supported/);

    await hello(ws, rpc);
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'quantilica/rm-rf' }));
    const unknown = await rpc.next();
    assert.equal(unknown.error?.code, -32601);
    assert.match(
      unknown.error?.message ?? '',
      /unknown method "quantilica\/rm-rf"; the agent answers .*quantilica\/hello, quantilica\/snapshot/,
    );

    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 4, method: 'quantilica/run', params: { fetcher: 'comex', args: 'rm -rf /' } }));
    const invalid = await rpc.next();
    assert.equal(invalid.error?.code, -32602);
    assert.match(invalid.error?.message ?? '', /invalid params for quantilica\/run: args: Expected array, received string/);

    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 5, method: 'quantilica/run', params: { fetcher: 'comex', command: '/bin/sh' } }));
    assert.match((await rpc.next()).error?.message ?? '', /Unrecognized key\(s\) in object: 'command'/);
  } finally {
    ws.terminate();
  }
  await stillServed();
});

test('a fetcher name with path characters is refused before the agent looks it up', async () => {
  for (const name of ['../../../bin/sh', 'comex/../anac', '/usr/bin/env', 'comex;id']) {
    await assert.rejects(watcher.run(name), (err: { code: number; message: string }) => {
      assert.equal(err.code, -32602, name);
      assert.match(err.message, /fetcher: must be a catalog fetcher name: .*no path characters/);
      return true;
    });
  }
  await assert.rejects(watcher.run('no-such-fetcher'), {
    code: ErrorCodes.unknownFetcher,
    message: /unknown fetcher "no-such-fetcher"; valid names: comex, anac/,
  });
  assert.equal(watcher.snapshot.runs.length, 0, 'nothing was enqueued');
});

test('cancelling an unknown run says no run matches', async () => {
  await assert.rejects(watcher.cancel({ runId: 'lz0000-deadbeef' }), {
    code: ErrorCodes.unknownRun,
    message: /no active or recent run matches "lz0000-deadbeef"/,
  });
  await assert.rejects(watcher.cancel({}), { code: -32602, message: /give exactly one of runId or fetcher/ });
});

test('10,000 requests in a burst are all answered, memory stays bounded, others are served', async () => {
  const ws = await rawSocket();
  try {
    const rpc = answers(ws);
    await hello(ws, rpc);
    const baseline = rssMb();
    let peak = baseline;
    const sampler = setInterval(() => {
      peak = Math.max(peak, rssMb());
    }, 20);
    const total = 10_000;
    const ids = new Set<number>();
    const done = rpc.collect(total, (a) => {
      if (a.error === undefined && typeof a.id === 'number') ids.add(a.id);
    });
    for (let id = 1; id <= total; id++) {
      // Every tenth asks for the whole snapshot, so the answers outrun the socket at times.
      const method = id % 10 === 0 ? GetSnapshot.method : ListRuns.method;
      ws.send(JSON.stringify({ jsonrpc: '2.0', id: 1000 + id, method, params: method === ListRuns.method ? { limit: 5 } : undefined }));
    }
    const started = Date.now();
    await stillServed();
    const servedMs = Date.now() - started;
    await done;
    clearInterval(sampler);
    assert.equal(ids.size, total, 'every request got its own successful answer');
    assert.ok(servedMs < 5000, `another client waited ${servedMs} ms during the burst`);
    assert.ok(peak - baseline < 150, `agent RSS grew by ${peak - baseline} MB (from ${baseline} MB)`);
  } finally {
    ws.terminate();
  }
});

test('a client that floods requests and stops reading is dropped; memory bounded; others served', async () => {
  const ws = await rawSocket();
  const rpc = answers(ws);
  await hello(ws, rpc);
  const tcp = (ws as unknown as { _socket: { pause(): void; resume(): void } })._socket;
  tcp.pause();
  const baseline = rssMb();
  let peak = baseline;
  const sampler = setInterval(() => {
    peak = Math.max(peak, rssMb());
  }, 50);
  for (let id = 1; id <= 20_000; id++) ws.send(JSON.stringify({ jsonrpc: '2.0', id, method: GetSnapshot.method }));
  try {
    await waitFor(() => /"msg":"client dropped"/.test(agent.stderr()), {
      what: 'the agent to drop the client that stopped reading',
      timeoutMs: 30_000,
      intervalMs: 100,
    });
    for (let i = 0; i < 5; i++) await stillServed();
  } finally {
    clearInterval(sampler);
  }
  assert.match(agent.stderr(), /"reason":"(the client took nothing for \d+ ms|\d+ bytes not taken by the client, over the cap)/);
  assert.ok(peak - baseline < 150, `agent RSS grew by ${peak - baseline} MB (from ${baseline} MB)`);
  const closed = new Promise<void>((resolve) => ws.once('close', () => resolve()));
  tcp.resume();
  await closed;
});

test('a connection file with mode 0644, a symbolic link or another owner is refused', async () => {
  const dir = fs.mkdtempSync(path.join(env.root, 'conn-'));
  const good = path.join(dir, 'good.json');
  fs.copyFileSync(connectionFile(), good);
  fs.chmodSync(good, 0o600);
  const client = await connectAgent(good, { client: 'copy' });
  await client.close();

  const loose = path.join(dir, 'loose.json');
  fs.copyFileSync(connectionFile(), loose);
  fs.chmodSync(loose, 0o644);
  await assert.rejects(connectAgent(loose, { client: 't' }), {
    message: /its mode is 0644, it must be 0600 because it holds the agent's token/,
  });

  const link = path.join(dir, 'link.json');
  fs.symlinkSync(good, link);
  await assert.rejects(connectAgent(link, { client: 't' }), { message: /it is a symbolic link/ });

  assert.equal(process.getuid?.(), 0, 'planting a file owned by another user needs root (CI runs as root)');
  const foreign = path.join(dir, 'foreign.json');
  fs.copyFileSync(connectionFile(), foreign);
  fs.chmodSync(foreign, 0o600);
  fs.chownSync(foreign, 65534, 65534);
  await assert.rejects(connectAgent(foreign, { client: 't' }), { message: /is owned by uid 65534, not by you \(uid 0\)/ });

  await assert.rejects(connectAgent(path.join(dir, 'absent.json'), { client: 't' }), {
    message: /no agent connection file at .*: the agent is not running/,
  });
});

interface Answer {
  id: number | null;
  result?: unknown;
  error?: { code: number; message: string };
}

function tryUpgrade(headers: Record<string, string>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1',
      port: info.port,
      path: '/',
      headers: {
        Connection: 'Upgrade',
        Upgrade: 'websocket',
        'Sec-WebSocket-Version': '13',
        'Sec-WebSocket-Key': crypto.randomBytes(16).toString('base64'),
        ...headers,
      },
    });
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('upgrade', (_res, socket) => {
      socket.destroy();
      resolve({ status: 101, body: '' });
    });
    req.on('error', reject);
    req.end();
  });
}

function rawSocket(): Promise<WebSocket> {
  const ws = new WebSocket(`ws://127.0.0.1:${info.port}/`, {
    headers: { Authorization: `Bearer ${info.token}` },
    maxPayload: 64 * 1024 * 1024,
  });
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
  });
}

/** Answers (responses, not notifications) in arrival order. */
function answers(ws: WebSocket) {
  const queue: Answer[] = [];
  let wake: (() => void) | null = null;
  ws.on('message', (data: Buffer) => {
    const message = JSON.parse(data.toString('utf8')) as Answer & { method?: string };
    if (message.method !== undefined) return;
    queue.push(message);
    wake?.();
  });
  return {
    async next(): Promise<Answer> {
      while (queue.length === 0)
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
      return queue.shift()!;
    },
    async collect(count: number, each: (a: Answer) => void): Promise<void> {
      for (let i = 0; i < count; i++) each(await this.next());
    },
  };
}

async function hello(ws: WebSocket, rpc: ReturnType<typeof answers>): Promise<void> {
  ws.send(JSON.stringify({ jsonrpc: '2.0', id: 0, method: Hello.method, params: { protocolVersion: 1, client: 'raw' } }));
  assert.equal((await rpc.next()).error, undefined);
}

function rssMb(): number {
  const status = fs.readFileSync(`/proc/${agent.child.pid}/status`, 'utf8');
  return Math.round(Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024);
}
