// The protocol server over a real socket, with a small in-test AgentControl standing in for the
// agent (the real agent is exercised by test/agent/protocolSecurity.test.ts). Covers what needs
// server options the agent does not expose: short ping and stall timers, a small send cap.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import { WebSocket } from 'ws';
import { type AgentClient, connectAgent } from '../../agent/client/agentClient';
import { UnknownFetcherError, UnknownRunError } from '../../agent/errors';
import { memoryLogger } from '../support/memoryLogger';
import type { AgentControl, FlushResult } from '../../agent/server/agentControl';
import { readConnectionFile } from '../../shared/node/connectionFile';
import { startAgentServer, type AgentServer } from '../../agent/server/startAgentServer';
import { StateHub } from '../../agent/state/stateHub';
import { ErrorCodes, GetSnapshot, Hello, type FlushProgress, type RunInfo, type ScheduleStatus } from '../../shared/protocol';
import { waitFor } from '../support/waitFor';

class TestControl implements AgentControl {
  readonly runs = new Map<string, RunInfo>();
  pending = 3;
  readonly hub = new StateHub(() => ({
    agent: {
      pid: process.pid,
      host: 'test',
      startedAt: new Date(0).toISOString(),
      protocolVersion: 1,
      mode: 'pools',
      dataDir: '/d',
      lockDir: '/l',
    },
    catalog: [{ name: 'alpha', pool: 'heavy-io', aliases: [], demo: true }],
    pools: [{ name: 'heavy-io', size: 1, used: 0, waiting: 0, waitTimeoutSeconds: 60, slots: [] }],
    runs: [...this.runs.values()],
    disk: null,
    spool: {
      path: null,
      fallback: false,
      pending: this.pending,
      oldestAgeSeconds: null,
      lastFlushAt: null,
      lastFlushError: null,
      lost: 0,
      database: 'connected',
      error: null,
    },
    schedule: null,
  }));
  private seq = 0;

  async run(fetcher: string, args: string[]): Promise<RunInfo> {
    await Promise.resolve();
    if (fetcher !== 'alpha') throw new UnknownFetcherError(fetcher, ['alpha']);
    const run: RunInfo = {
      runId: `r${++this.seq}`,
      fetcher,
      pool: 'heavy-io',
      status: 'waiting',
      trigger: 'protocol',
      args,
      enqueuedAt: new Date().toISOString(),
      startedAt: null,
      finishedAt: null,
      slot: null,
      pid: null,
      exitCode: null,
      signal: null,
      reason: null,
      wait: { kind: 'pool', position: 1 },
      logPath: null,
    };
    this.runs.set(run.runId, run);
    this.hub.publish({ kind: 'run', run });
    return run;
  }

  waitRun(): Promise<RunInfo> {
    return new Promise(() => {});
  }

  cancel(target: { runId?: string }): Promise<RunInfo[]> {
    const run = target.runId === undefined ? undefined : this.runs.get(target.runId);
    if (!run) return Promise.reject(new UnknownRunError(target.runId ?? ''));
    const cancelled: RunInfo = { ...run, status: 'cancelled' };
    this.runs.set(run.runId, cancelled);
    this.hub.publish({ kind: 'run', run: cancelled });
    return Promise.resolve([cancelled]);
  }

  listRuns(limit: number): RunInfo[] {
    return [...this.runs.values()].slice(0, limit);
  }

  tailLog(runId: string): Promise<{ path: string; text: string; truncated: boolean }> {
    return Promise.reject(new UnknownRunError(runId));
  }

  async flush(onProgress: (sent: number, remaining: number) => void): Promise<FlushResult> {
    let sent = 0;
    while (this.pending > 0) {
      this.pending -= 1;
      sent += 1;
      onProgress(sent, this.pending);
      await Promise.resolve();
    }
    return { sent, remaining: 0, error: null };
  }

  setSchedulePaused(paused: boolean): ScheduleStatus {
    return { paused, catchUp: false, entries: [] };
  }
}

let dir: string;
let control: TestControl;
let server: AgentServer;
const logger = memoryLogger();
const connectionFile = () => path.join(dir, 'home', 'agent.json');

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quantilica-protocol-'));
  control = new TestControl();
  server = await startAgentServer(control, {
    port: 0,
    connectionFile: connectionFile(),
    logger,
    pingIntervalMs: 200,
    stallTimeoutMs: 300,
    sendBufferCapBytes: 256 * 1024,
  });
});

after(async () => {
  await server.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

test('the connection file is 0600 in a 0700 directory and names the port and token', async () => {
  assert.equal(fs.statSync(connectionFile()).mode & 0o777, 0o600);
  assert.equal(fs.statSync(path.dirname(connectionFile())).mode & 0o777, 0o700);
  const info = await readConnectionFile(connectionFile());
  assert.equal(info.port, server.port);
  assert.equal(info.token, server.token);
  assert.ok(Buffer.from(info.token, 'base64url').length >= 16, 'at least 128 bits');
});

test('changes reach every client in version order, and hello comes first', async () => {
  const a = await connectAgent(connectionFile(), { client: 'a' });
  const b = await connectAgent(connectionFile(), { client: 'b' });
  try {
    const seen: number[] = [];
    a.onChanged((e) => {
      if (e.kind === 'change') seen.push(e.params.version);
    });
    const start = a.snapshot.version;
    for (let i = 0; i < 20; i++) await b.run('alpha', [`n=${i}`]);
    await waitFor(() => seen.length === 20, { what: '20 changes at client a' });
    assert.deepEqual(
      seen,
      Array.from({ length: 20 }, (_, i) => start + i + 1),
    );
    assert.equal(a.snapshot.runs.length, b.snapshot.runs.length);
    assert.deepEqual(a.snapshot, b.snapshot, 'both copies of the state agree');

    await assert.rejects(b.run('../../bin/sh'), (err: { code: number; message: string }) => {
      assert.equal(err.code, -32602);
      assert.match(err.message, /fetcher: must be a catalog fetcher name/);
      return true;
    });
    await assert.rejects(b.run('beta'), { code: ErrorCodes.unknownFetcher, message: /unknown fetcher "beta"; valid names: alpha/ });
    await assert.rejects(b.cancel({ runId: 'nope' }), { code: ErrorCodes.unknownRun });
  } finally {
    await a.close();
    await b.close();
  }
});

test('flush reports work-done progress with sent and remaining', async () => {
  const client = await connectAgent(connectionFile(), { client: 'flush' });
  try {
    const progress: FlushProgress[] = [];
    const result = await client.flush((p) => progress.push(p));
    assert.deepEqual(result, { sent: 3, remaining: 0, error: null });
    await waitFor(() => progress.at(-1)?.kind === 'end', { what: 'the end of the progress' });
    assert.deepEqual(
      progress.map((p) => [p.kind, p.sent, p.remaining]),
      [
        ['begin', 0, 3],
        ['report', 1, 2],
        ['report', 2, 1],
        ['report', 3, 0],
        ['end', 3, 0],
      ],
    );
  } finally {
    await client.close();
  }
});

test('a request before hello is refused with handshakeRequired', async () => {
  const ws = await rawSocket(server);
  try {
    const answer = await request(ws, { jsonrpc: '2.0', id: 1, method: GetSnapshot.method });
    assert.equal(answer.error?.code, ErrorCodes.handshakeRequired);
    assert.match(answer.error?.message ?? '', /send quantilica\/hello with protocolVersion 1 before quantilica\/snapshot/);
    const wrong = await request(ws, { jsonrpc: '2.0', id: 2, method: Hello.method, params: { protocolVersion: 99, client: 'old' } });
    assert.equal(wrong.error?.code, ErrorCodes.protocolVersion);
    assert.match(wrong.error?.message ?? '', /old speaks protocol version 99, this agent speaks version 1/);
  } finally {
    ws.terminate();
  }
});

test('a client that does not answer pings is dropped', async () => {
  const ws = await rawSocket(server, { autoPong: false });
  const closed = new Promise<void>((resolve) => ws.once('close', () => resolve()));
  await waitFor(() => logger.records.some((r) => r.msg === 'client dropped' && /no pong/.test(JSON.stringify(r.obj))), {
    what: 'the ping eviction',
    timeoutMs: 3000,
  });
  await closed;
});

test('a client whose requests the agent stopped reading (too many in flight) is not dropped for its unread pongs', async () => {
  // Its answers wait on a gate the test opens only after several ping rounds, seen by a second client.
  // Rounds of 400 ms: the test process is both agent and client, and a loaded machine can hold its
  // event loop for longer than a shorter round, which drops a client whose pong was only late.
  let open!: () => void;
  const gate = new Promise<void>((resolve) => {
    open = resolve;
  });
  const slow = new (class extends TestControl {
    override async run(fetcher: string, args: string[]): Promise<RunInfo> {
      await gate;
      return super.run(fetcher, args);
    }
  })();
  const ownLog = memoryLogger();
  const file = path.join(dir, 'busy', 'agent.json');
  const ownServer = await startAgentServer(slow, { port: 0, connectionFile: file, logger: ownLog, pingIntervalMs: 400 });
  const busy = await connectAgent(file, { client: 'busy' });
  const watcher = await rawSocket(ownServer);
  try {
    let closed = false;
    busy.onClose(() => {
      closed = true;
    });
    // More than the agent's 256 requests in flight: it stops reading this client's socket.
    const answers = Promise.all(Array.from({ length: 300 }, () => busy.run('alpha')));
    let pings = 0;
    watcher.on('ping', () => {
      pings += 1;
    });
    await waitFor(() => pings >= 5, { what: 'five ping rounds while the busy client waits', timeoutMs: 20_000 });
    open();
    assert.equal((await answers).length, 300);
    assert.equal(closed, false);
    assert.equal(
      ownLog.records.some((r) => r.msg === 'client dropped'),
      false,
      'no client dropped',
    );
  } finally {
    watcher.terminate();
    await busy.close();
    await ownServer.close();
  }
});

test('a subscribed client that stops reading is dropped; the others get every change', async () => {
  // A server of its own with pings out of the way, so only the send cap or the stall can drop it.
  const own = new TestControl();
  const ownLog = memoryLogger();
  const file = path.join(dir, 'own', 'agent.json');
  const ownServer = await startAgentServer(own, {
    port: 0,
    connectionFile: file,
    logger: ownLog,
    pingIntervalMs: 60_000,
    stallTimeoutMs: 300,
    sendBufferCapBytes: 256 * 1024,
  });
  const slow = await connectAgent(file, { client: 'slow' });
  const fast = await connectAgent(file, { client: 'fast' });
  try {
    const closed = new Promise<void>((resolve) => slow.onClose(() => resolve()));
    pauseSocket(slow);
    const before = fast.snapshot.version;
    const dropped = () => ownLog.records.find((r) => r.msg === 'client dropped');
    let published = 0;
    // Changes come in batches with the event loop turning between them, as a busy agent's do; the
    // slow client's kernel buffers fill first, then the agent's, then it is dropped.
    while (!dropped() && published < 100_000) {
      for (let i = 0; i < 200; i++) void own.run('alpha', ['x'.repeat(500)]);
      published += 200;
      await new Promise((resolve) => setImmediate(resolve));
    }
    const record = dropped();
    assert.ok(record, `not dropped after ${published} changes`);
    assert.match(JSON.stringify(record.obj), /over the cap|took nothing/);
    await waitFor(() => fast.snapshot.version === before + published, { what: 'the fast client to get every change', timeoutMs: 20_000 });
    resumeSocket(slow);
    await closed;
    assert.equal(ownServer.clientCount(), 1);
  } finally {
    await fast.close();
    await ownServer.close();
  }
});

test('close removes the connection file and says going away', async () => {
  const client = await connectAgent(connectionFile(), { client: 'last' });
  const code = new Promise<number>((resolve) => client.onClose((c) => resolve(c)));
  await server.close();
  assert.equal(await code, 1001);
  assert.equal(fs.existsSync(connectionFile()), false);
});

interface Answer {
  id: number | null;
  result?: unknown;
  error?: { code: number; message: string };
}

function rawSocket(target: AgentServer, opts: { autoPong?: boolean } = {}): Promise<WebSocket> {
  const ws = new WebSocket(`ws://127.0.0.1:${target.port}/`, {
    headers: { Authorization: `Bearer ${target.token}` },
    autoPong: opts.autoPong ?? true,
  });
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
  });
}

function request(ws: WebSocket, message: object): Promise<Answer> {
  return new Promise((resolve) => {
    ws.once('message', (data: Buffer) => resolve(JSON.parse(data.toString('utf8')) as Answer));
    ws.send(JSON.stringify(message));
  });
}

// The client's underlying TCP socket; reaching it is the only way to make a real client stop reading.
function tcp(client: AgentClient): { pause(): void; resume(): void } {
  return (client as unknown as { ws: { _socket: { pause(): void; resume(): void } } }).ws._socket;
}
function pauseSocket(client: AgentClient): void {
  tcp(client).pause();
}
function resumeSocket(client: AgentClient): void {
  tcp(client).resume();
}
