import * as http from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import { PROTOCOL_VERSION } from '../../shared/protocol';
import { EnvironmentError } from '../errors';
import type { Logger } from '../log/logger';
import type { AgentControl } from './agentControl';
import { ClientConnection } from './clientConnection';
import { removeConnectionFile, writeConnectionFile } from './connectionFile';
import { requestHandlers } from './requestHandlers';
import { RefusalLog } from './refusalLog';
import { LoopbackPeers } from './loopbackPeers';
import { newNonce, PROOF_HEADER, proofOf, sameSecret, tokenDigest } from '../../shared/node/handshakeProof';
import { checkUpgrade, newToken } from './upgradeGuard';
import { readProcInfo } from '../../shared/node/procInfo';
import { bootId } from '../../shared/node/agentIdentity';

export interface AgentServerOptions {
  /** 0 picks a free port. */
  port: number;
  connectionFile: string;
  logger: Logger;
  /** Largest frame a client may send (default 1 MiB); a larger one closes the connection with 1009. */
  maxFrameBytes?: number;
  /** Bytes a client may leave unread before it is dropped (default 8 MiB). */
  sendBufferCapBytes?: number;
  /** Ping period; a client that has not answered the previous ping is dropped (default 30 s). */
  pingIntervalMs?: number;
  /** A client that reads nothing this long while its answers pile up is dropped (default 10 s). */
  stallTimeoutMs?: number;
  /** Connections at once (default 64); one more is refused with 503. */
  maxClients?: number;
  /** Connections not yet authenticated at once (default 64); one more is closed at accept. */
  maxPending?: number;
  /** A connection not authenticated within this long is closed (default 5 s). */
  authTimeoutMs?: number;
  /** Refused connections are logged at most once per this period, in aggregate (default 10 s). */
  refusalLogPeriodMs?: number;
  /** Connections of other accounts (closed at accept) are logged at most once per this period (default 60 s). */
  foreignLogPeriodMs?: number;
}

export interface AgentServer {
  readonly port: number;
  readonly token: string;
  /** Connected clients right now. */
  clientCount(): number;
  /** Connections refused since the start (any reason but another account's). */
  refusedCount(): number;
  /** Connections of other accounts closed at accept since the start. */
  foreignCount(): number;
  close(): Promise<void>;
}

const LOOPBACK = '127.0.0.1';
const CLOSE_GRACE_MS = 1000;

/**
 * Serves the protocol on 127.0.0.1 and writes the connection file clients read the port and token
 * from. Upgrades are checked (Origin, Host, token) before any WebSocket exists.
 */
export async function startAgentServer(control: AgentControl, opts: AgentServerOptions): Promise<AgentServer> {
  const logger = opts.logger;
  const token = newToken();
  const digest = tokenDigest(token);
  const cap = opts.sendBufferCapBytes ?? 8 * 1024 * 1024;
  const limits = {
    capBytes: cap,
    highWaterBytes: Math.min(1024 * 1024, Math.floor(cap / 2)),
    stallTimeoutMs: opts.stallTimeoutMs ?? 10_000,
    maxInFlight: 256,
  };
  const maxClients = opts.maxClients ?? 64;
  const handlers = requestHandlers(control);
  const clients = new Set<ClientConnection>();
  let nextId = 1;
  const refusals = new RefusalLog(logger, opts.refusalLogPeriodMs);
  const maxPending = opts.maxPending ?? 64;
  const authTimeoutMs = opts.authTimeoutMs ?? 5000;
  // Sockets from accept until authenticated: capped and timed, so idle or slow connections of anyone
  // on the machine cannot fill the agent's descriptor table.
  const pending = new Map<Socket, NodeJS.Timeout>();
  const authenticated = (socket: Duplex) => {
    const timer = pending.get(socket as Socket);
    if (timer !== undefined) clearTimeout(timer);
    pending.delete(socket as Socket);
    unverified.delete(socket as Socket);
  };
  const agentProofs = new WeakMap<http.IncomingMessage, string>();
  const peers = new LoopbackPeers();
  const ownUid = process.getuid?.() ?? -1;
  let peerTablesMissing = false;
  // Other accounts' connections are logged apart and more rarely: a flood of them costs a line a minute.
  const foreign = new RefusalLog(logger, opts.foreignLogPeriodMs ?? 60_000, 'closed connections of other accounts to the protocol server');

  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: opts.maxFrameBytes ?? 1024 * 1024,
    perMessageDeflate: false,
    clientTracking: false,
  });
  wss.on('headers', (headers: string[], req: http.IncomingMessage) => {
    const proof = agentProofs.get(req);
    if (proof !== undefined) headers.push(`${PROOF_HEADER}: ${proof}`);
  });
  const server = http.createServer((_req, res) => {
    res.writeHead(426, { 'Content-Type': 'text/plain; charset=utf-8', Connection: 'close' });
    res.end('the Quantilica agent speaks JSON-RPC over WebSocket only\n');
  });
  server.on('clientError', (_err, socket) => socket.destroy());
  server.headersTimeout = authTimeoutMs;
  server.requestTimeout = authTimeoutMs;
  // Another account's connection is closed before it can keep a place among the pending ones, so no
  // other user can fill the cap and lock the owner out. Its account is looked up at accept while the
  // kernel's tables are cheap to read; in a flood (thousands of connections make one read take
  // 100 ms or more) in batches, and always before the cap refuses anyone.
  const unverified = new Map<Socket, number>();
  let verifyTimer: NodeJS.Timeout | null = null;
  const isForeign = (socket: Socket, acceptedAt: number): boolean => {
    const uid = peers.uidOf(
      {
        peerAddress: socket.remoteAddress ?? '',
        peerPort: socket.remotePort ?? 0,
        localAddress: socket.localAddress ?? '',
        localPort: socket.localPort ?? 0,
      },
      acceptedAt,
    );
    if (uid === undefined) {
      if (!peerTablesMissing)
        logger.warn(
          {},
          'cannot read /proc/net/tcp: the account of a connection is not checked, every connection counts against the pending cap',
        );
      peerTablesMissing = true;
      return false;
    }
    if (uid === ownUid) return false;
    foreign.count(uid === null ? 'peer-gone' : 'other-account');
    authenticated(socket);
    socket.destroy();
    return true;
  };
  const verifyPending = () => {
    if (verifyTimer !== null) clearTimeout(verifyTimer);
    verifyTimer = null;
    for (const [socket, acceptedAt] of unverified) {
      unverified.delete(socket);
      if (!socket.destroyed) isForeign(socket, acceptedAt);
    }
  };
  server.on('connection', (socket: Socket) => {
    const acceptedAt = performance.now();
    const now = peers.affordable(acceptedAt);
    if (now && isForeign(socket, acceptedAt)) return;
    if (pending.size >= maxPending && unverified.size > 0) {
      verifyPending();
      if (!now && isForeign(socket, acceptedAt)) return;
    }
    if (pending.size >= maxPending) {
      refusals.count('too-many-pending');
      socket.destroy();
      return;
    }
    const timer = setTimeout(() => {
      if (!pending.has(socket)) return;
      refusals.count('auth-timeout');
      socket.destroy();
    }, authTimeoutMs);
    timer.unref();
    pending.set(socket, timer);
    socket.once('close', () => authenticated(socket));
    if (!now) {
      unverified.set(socket, acceptedAt);
      verifyTimer ??= setTimeout(verifyPending, peers.affordableInMs()).unref();
    }
  });

  const listening = await listen(server, opts.port);
  const accept = (ws: WebSocket, socket: Duplex) => {
    const client = new ClientConnection(ws, control, handlers, logger, limits, nextId++, socket);
    clients.add(client);
    logger.debug({ client: client.id, clients: clients.size }, 'client connected');
    void client.whenClosed().then(() => clients.delete(client));
  };
  server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => socket.destroy());
    const verdict = checkUpgrade(req.headers, listening, digest);
    if (!verdict.ok) {
      refusals.count(verdict.reason);
      refuse(socket, verdict.status, verdict.body);
      return;
    }
    if (clients.size >= maxClients) {
      refusals.count('too-many-clients');
      refuse(socket, 503, `refused: ${maxClients} clients are connected already\n`);
      return;
    }
    if (verdict.kind === 'token') {
      wss.handleUpgrade(req, socket, head, (ws: WebSocket) => {
        authenticated(socket);
        accept(ws, socket);
      });
      return;
    }
    // The challenge: the agent proves first (a header of the 101 answer), so a client that finds an
    // impostor on the port has sent it nothing but a random nonce; then the client's first frame
    // must carry its own proof.
    const agentNonce = newNonce();
    agentProofs.set(req, `${agentNonce}.${proofOf('agent', token, verdict.clientNonce, agentNonce)}`);
    const expected = proofOf('client', token, verdict.clientNonce, agentNonce);
    wss.handleUpgrade(req, socket, head, (ws: WebSocket) => {
      ws.once('message', (data: Buffer, isBinary: boolean) => {
        const proof = isBinary || data.length > 512 ? null : clientProof(data.toString('utf8'));
        if (proof === null || !sameSecret(proof, expected)) {
          refusals.count('wrong-proof');
          ws.close(1008, 'wrong proof');
          setTimeout(() => ws.terminate(), 1000).unref();
          return;
        }
        authenticated(socket);
        accept(ws, socket);
      });
    });
  });

  const pingTimer = setInterval(() => {
    for (const client of clients) client.ping();
  }, opts.pingIntervalMs ?? 30_000);
  pingTimer.unref();

  try {
    await writeConnectionFile(opts.connectionFile, {
      port: listening,
      token,
      pid: process.pid,
      protocolVersion: PROTOCOL_VERSION,
      // Who and which process wrote the file: clients check them before connecting, so a file
      // left by a killed agent (its pid since reused by anyone) is recognised as stale.
      uid: process.getuid?.() ?? -1,
      startTime: readProcInfo(process.pid)?.startTime ?? 0,
      bootId: bootId(),
    });
  } catch (err) {
    clearInterval(pingTimer);
    server.close();
    throw err;
  }
  logger.info({ port: listening, connectionFile: opts.connectionFile }, 'protocol server listening');

  let closing: Promise<void> | null = null;
  return {
    port: listening,
    token,
    clientCount: () => clients.size,
    refusedCount: () => refusals.total,
    foreignCount: () => foreign.total,
    close: () => {
      closing ??= (async () => {
        clearInterval(pingTimer);
        refusals.flush();
        foreign.flush();
        if (verifyTimer !== null) clearTimeout(verifyTimer);
        for (const socket of pending.keys()) socket.destroy();
        // First the file, so no new client finds a server that is going away.
        await removeConnectionFile(opts.connectionFile, token);
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        await Promise.all([...clients].map((c) => c.close(CLOSE_GRACE_MS)));
        wss.close();
        await stopped;
        logger.info({}, 'protocol server closed');
      })();
      return closing;
    },
  };
}

/** The client's first frame in the challenge: `{"proof": "<base64url>"}`. */
function clientProof(text: string): string | null {
  try {
    const value = (JSON.parse(text) as { proof?: unknown }).proof;
    return typeof value === 'string' ? value : null;
  } catch {
    return null;
  }
}

function listen(server: http.Server, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EADDRINUSE' || err.code === 'EACCES') {
        reject(
          new EnvironmentError(
            `QUANTILICA_PORT=${port}: cannot listen on 127.0.0.1:${port} (${err.code === 'EADDRINUSE' ? 'the port is in use' : 'not permitted'}); choose another port, or 0 for a free one`,
          ),
        );
      } else reject(err);
    });
    server.listen(port, LOOPBACK, () => {
      server.off('error', reject);
      const address = server.address();
      if (address === null || typeof address === 'string') reject(new Error('the protocol server has no TCP address'));
      else resolve(address.port);
    });
  });
}

const STATUS_TEXT: Record<number, string> = { 400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 503: 'Service Unavailable' };

function refuse(socket: Duplex, status: number, body: string): void {
  const length = Buffer.byteLength(body);
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? 'Error'}\r\nContent-Type: text/plain; charset=utf-8\r\n` +
      `Content-Length: ${length}\r\nConnection: close\r\n\r\n${body}`,
  );
}
