import * as http from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import { PROTOCOL_VERSION } from '../../shared/protocol';
import type { Logger } from '../log/logger';
import type { AgentControl } from './agentControl';
import { ClientConnection } from './clientConnection';
import { removeConnectionFile, writeConnectionFile } from './connectionFile';
import { requestHandlers } from './requestHandlers';
import { checkUpgrade, newToken, tokenDigest } from './upgradeGuard';

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
}

export interface AgentServer {
  readonly port: number;
  readonly token: string;
  /** Connected clients right now. */
  clientCount(): number;
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

  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: opts.maxFrameBytes ?? 1024 * 1024,
    perMessageDeflate: false,
    clientTracking: false,
  });
  const server = http.createServer((_req, res) => {
    res.writeHead(426, { 'Content-Type': 'text/plain; charset=utf-8', Connection: 'close' });
    res.end('the Quantilica agent speaks JSON-RPC over WebSocket only\n');
  });
  server.on('clientError', (_err, socket) => socket.destroy());

  const listening = await listen(server, opts.port);
  server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => socket.destroy());
    const verdict = checkUpgrade(req.headers, listening, digest);
    if (!verdict.ok) {
      logger.warn({ status: verdict.status, origin: req.headers.origin, host: req.headers.host }, verdict.body.trim());
      refuse(socket, verdict.status, verdict.body);
      return;
    }
    if (clients.size >= maxClients) {
      refuse(socket, 503, `refused: ${maxClients} clients are connected already\n`);
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws: WebSocket) => {
      const client = new ClientConnection(ws, control, handlers, logger, limits, nextId++);
      clients.add(client);
      logger.info({ client: client.id, clients: clients.size }, 'client connected');
      void client.whenClosed().then(() => clients.delete(client));
    });
  });

  const pingTimer = setInterval(() => { for (const client of clients) client.ping(); }, opts.pingIntervalMs ?? 30_000);
  pingTimer.unref();

  try {
    await writeConnectionFile(opts.connectionFile, { port: listening, token, pid: process.pid, protocolVersion: PROTOCOL_VERSION });
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
    close: () => {
      closing ??= (async () => {
        clearInterval(pingTimer);
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

function listen(server: http.Server, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
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
