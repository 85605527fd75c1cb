import type { IncomingMessage } from 'node:http';
import { WebSocket } from 'ws';
import type { ConnectionInfo } from '../protocol';
import { newNonce, NONCE_HEADER, PROOF_HEADER, proofOf, sameSecret } from './handshakeProof';

/** Why a connection to the agent failed: `unreachable` (nothing answers), `refused` (the agent said
 * no), `impostor` (something answered that could not prove it knows the token). */
export class AgentSocketError extends Error {
  constructor(
    readonly reason: 'unreachable' | 'refused' | 'impostor',
    message: string,
  ) {
    super(message);
    this.name = 'AgentSocketError';
  }
}

export interface AgentSocketOptions {
  handshakeTimeoutMs: number;
  maxPayload: number;
}

/**
 * Opens an authenticated WebSocket to the agent without ever sending the token: the upgrade carries
 * a random nonce, the agent answers with an HMAC of both nonces under the token, and only when that
 * proof is right does the client send its own proof (a different HMAC) as its first frame. Whatever
 * listens on a stale port learns a nonce and nothing else.
 */
export function openAgentSocket(info: ConnectionInfo, opts: AgentSocketOptions): Promise<WebSocket> {
  const clientNonce = newNonce();
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${info.port}/`, {
      headers: { [NONCE_HEADER]: clientNonce },
      maxPayload: opts.maxPayload,
      perMessageDeflate: false,
      handshakeTimeout: opts.handshakeTimeoutMs,
    });
    let clientProof: string | null = null;
    let settled = false;
    const fail = (err: AgentSocketError) => {
      if (settled) return;
      settled = true;
      ws.removeAllListeners('open');
      ws.terminate();
      reject(err);
    };
    ws.once('upgrade', (res: IncomingMessage) => {
      const header = res.headers[PROOF_HEADER];
      const [agentNonce, proof] = typeof header === 'string' ? header.split('.') : [];
      if (!agentNonce || !proof || !sameSecret(proof, proofOf('agent', info.token, clientNonce, agentNonce))) {
        fail(
          new AgentSocketError(
            'impostor',
            `what answers on port ${info.port} is not the agent (it cannot prove it knows the token); nothing was sent to it`,
          ),
        );
        return;
      }
      clientProof = proofOf('client', info.token, clientNonce, agentNonce);
    });
    ws.once('open', () => {
      if (settled || clientProof === null) return;
      ws.send(JSON.stringify({ proof: clientProof }), (err) => {
        if (err) {
          fail(new AgentSocketError('unreachable', `the connection to the agent on port ${info.port} closed: ${err.message}`));
          return;
        }
        if (settled) return;
        settled = true;
        ws.removeAllListeners('error');
        resolve(ws);
      });
    });
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        if (body.length < 4096) body += chunk;
      });
      res.on('end', () =>
        fail(new AgentSocketError('refused', `the agent on port ${info.port} refused the connection (${res.statusCode}): ${body.trim()}`)),
      );
    });
    ws.on('error', (err) => fail(new AgentSocketError('unreachable', `no agent answers on port ${info.port} (${err.message})`)));
  });
}
