// The handshake that keeps the token at home: the agent proves it knows the token before a client
// sends anything, and a client must prove it too before its first request is read.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import type { IncomingMessage } from 'node:http';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { WebSocket, WebSocketServer } from 'ws';
import { AgentSocketError, openAgentSocket } from '../../shared/node/agentSocket';
import { readConnectionFile } from '../../shared/node/connectionFile';
import { newNonce, PROOF_HEADER, proofOf } from '../../shared/node/handshakeProof';
import { newToken } from '../../agent/server/upgradeGuard';
import { GetSnapshot } from '../../shared/protocol';
import { makeTestEnv, startAgent, type TestEnv } from '../support/harness';

const stations: TestEnv[] = [];
after(() => {
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

test('an impostor that accepts any upgrade gets a nonce and nothing else', { timeout: 60_000 }, async () => {
  const received: string[] = [];
  const headers: IncomingMessage['headers'][] = [];
  const impostor = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise((resolve) => impostor.once('listening', resolve));
  impostor.on('connection', (ws, req) => {
    headers.push(req.headers);
    ws.on('message', (data: Buffer) => received.push(data.toString('utf8')));
  });
  const token = newToken();
  const port = (impostor.address() as { port: number }).port;
  try {
    await assert.rejects(
      openAgentSocket({ port, token, pid: process.pid, protocolVersion: 1 }, { handshakeTimeoutMs: 5000, maxPayload: 1 << 20 }),
      (err: unknown) => err instanceof AgentSocketError && err.reason === 'impostor',
    );
    assert.equal(headers.length, 1);
    assert.equal(JSON.stringify(headers[0]).includes(token), false, 'the token is not in the upgrade');
    assert.equal(headers[0].authorization, undefined);
    assert.deepEqual(received, [], 'not one frame was sent');
  } finally {
    impostor.close();
  }
});

test('a client that cannot prove the token is closed before its first request is read', { timeout: 60_000 }, async () => {
  const s = makeTestEnv(null);
  stations.push(s);
  const agent = await startAgent(s);
  try {
    const info = await readConnectionFile(path.join(s.home, '.quantilica', 'agent.json'));
    const clientNonce = newNonce();
    const ws = new WebSocket(`ws://127.0.0.1:${info.port}/`, { headers: { 'x-quantilica-nonce': clientNonce } });
    // 'upgrade' and 'open' come in the same tick: listen for both before waiting.
    const upgraded = new Promise<string>((resolve, reject) => {
      ws.once('upgrade', (res) => resolve(String(res.headers[PROOF_HEADER])));
      ws.once('error', reject);
    });
    const opened = new Promise((resolve) => ws.once('open', resolve));
    const [agentNonce, agentProof] = (await upgraded).split('.');
    assert.equal(agentProof, proofOf('agent', info.token, clientNonce, agentNonce), 'the agent proves it knows the token');
    await opened;
    const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
    const answers: string[] = [];
    ws.on('message', (data: Buffer) => answers.push(data.toString('utf8')));
    ws.send(JSON.stringify({ proof: proofOf('client', newToken(), clientNonce, agentNonce) }));
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: GetSnapshot.method }));
    assert.equal(await closed, 1008);
    assert.deepEqual(answers, [], 'no request was answered');
  } finally {
    const exited = new Promise((resolve) => agent.child.once('exit', resolve));
    agent.child.kill('SIGTERM');
    await exited;
  }
});
