import {
  createMessageConnection,
  ErrorCodes as RpcErrorCodes,
  Message,
  ResponseError,
  type CancellationToken,
  type MessageConnection,
} from 'vscode-jsonrpc';
import type { RawData, WebSocket } from 'ws';
import {
  BEFORE_HELLO,
  Changed,
  ErrorCodes,
  FlushTelemetry,
  Hello,
  PROTOCOL_VERSION,
  REQUESTS,
  type ChangedParams,
  type RequestMethod,
  type Snapshot,
} from '../../shared/protocol';
import { errorResponseText, TextMessageReader, TextMessageWriter } from '../../shared/textMessageTransport';
import { wsText } from '../../shared/node/wsText';
import type { Logger } from '../log/logger';
import type { AgentControl } from './agentControl';
import { parseParams } from './parseParams';
import type { RequestContext, RequestHandlers } from './requestHandlers';
import { SendFlow, type SendFlowLimits } from './sendFlow';
import { toResponseError } from './toResponseError';

export interface ClientLimits extends SendFlowLimits {
  /** Requests received and not yet answered; past it the agent stops reading the client's socket. */
  maxInFlight: number;
}

const CLOSE_GOING_AWAY = 1001;
const CLOSE_UNSUPPORTED = 1003;

/** One client of the protocol: its JSON-RPC connection, its change stream and its flow control. */
export class ClientConnection {
  /** Cleared before each ping and set by the pong: a client still false at the next ping is gone. */
  alive = true;
  private readonly rpc: MessageConnection;
  private readonly flow: SendFlow;
  private unsubscribe: (() => void) | null = null;
  private inFlight = 0;
  private paused = false;
  private closed = false;
  private readonly closedPromise: Promise<void>;

  constructor(
    private readonly ws: WebSocket,
    private readonly control: AgentControl,
    private readonly handlers: RequestHandlers,
    private readonly logger: Logger,
    private readonly limits: ClientLimits,
    readonly id: number,
    transport: { cork(): void; uncork(): void } | null = null,
  ) {
    this.flow = new SendFlow(ws, limits, (reason) => this.drop(reason), transport);
    const reader = new TextMessageReader((code, error) => {
      this.flow.send(errorResponseText(code, error)).catch(() => undefined);
    });
    const writer = new TextMessageWriter(
      (text) => this.flow.send(text),
      (message) => {
        if (Message.isResponse(message)) this.answered();
      },
    );
    this.rpc = createMessageConnection(reader, writer, {
      // A notification to a client that is going away fails by design (the change stream races the
      // close); that is counted at debug level, not a warning per change.
      error: (message) => {
        if (message.startsWith('Sending notification failed') && (this.closed || ws.readyState !== ws.OPEN))
          logger.debug({ client: id, reason: 'client-gone' }, message);
        else logger.warn({ client: id }, message);
      },
      warn: (message) => logger.warn({ client: id }, message),
      info: (message) => logger.debug({ client: id }, message),
      log: (message) => logger.debug({ client: id }, message),
    });
    this.rpc.onRequest((method, params, token) => this.dispatch(method, params, token));
    // Notifications have no answer; unknown ones are ignored ($/cancelRequest is handled by the connection).
    this.rpc.onNotification((method) => logger.debug({ client: id, method }, 'ignored notification'));
    this.rpc.listen();

    ws.on('message', (data: RawData, isBinary: boolean) => {
      if (isBinary) {
        ws.close(CLOSE_UNSUPPORTED, 'binary frames are not supported: send JSON-RPC as text');
        return;
      }
      const message = reader.receive(wsText(data));
      if (message !== undefined && Message.isRequest(message)) this.received();
    });
    ws.on('pong', () => {
      this.alive = true;
    });
    ws.on('error', (err) => logger.warn({ client: id, err: err.message }, 'client socket error'));
    this.closedPromise = new Promise((resolve) => {
      ws.once('close', (code: number, reason: Buffer) => {
        logger.debug({ client: id, code, reason: reason.toString('utf8') }, 'client disconnected');
        this.dispose();
        reader.closed();
        resolve();
      });
    });
  }

  /**
   * Dead-peer check, one round per ping interval. Skipped while the agent itself has stopped reading
   * the client (too many requests in flight): its pong waits, unread, behind its requests, so a
   * missing pong says nothing then. A client that is really gone is still found: the answers the
   * agent writes to it pile up and SendFlow drops it (cap or stall).
   */
  ping(): void {
    if (this.paused) return;
    if (!this.alive) {
      this.drop('no pong since the last ping');
      return;
    }
    this.alive = false;
    this.ws.ping();
  }

  /** Closes with "going away" and waits for the client, then cuts it off after `graceMs`. */
  async close(graceMs: number): Promise<void> {
    if (!this.closed) this.ws.close(CLOSE_GOING_AWAY, 'the agent is shutting down');
    const timer = setTimeout(() => this.ws.terminate(), graceMs);
    await this.closedPromise;
    clearTimeout(timer);
  }

  whenClosed(): Promise<void> {
    return this.closedPromise;
  }

  private async dispatch(method: string, params: unknown, cancel: CancellationToken): Promise<unknown> {
    if (!Object.hasOwn(REQUESTS, method)) {
      throw new ResponseError(
        RpcErrorCodes.MethodNotFound,
        `unknown method ${JSON.stringify(method)}; the agent answers ${Object.keys(REQUESTS).join(', ')}`,
      );
    }
    const known = method as RequestMethod;
    if (!BEFORE_HELLO.has(known) && this.unsubscribe === null) {
      throw new ResponseError(
        ErrorCodes.handshakeRequired,
        `send ${Hello.method} with protocolVersion ${PROTOCOL_VERSION} before ${method}`,
      );
    }
    try {
      await this.flow.ready();
      if (this.closed) throw new ResponseError(RpcErrorCodes.ConnectionInactive, 'the connection is closed');
      const parsed = parseParams(known, params);
      const handler = this.handlers[known] as (p: unknown, ctx: RequestContext) => unknown;
      return await handler(parsed, this.context(cancel));
    } catch (err) {
      throw toResponseError(err, method, this.logger);
    }
  }

  private context(cancel: CancellationToken): RequestContext {
    return {
      cancel,
      startChanges: (snapshot: Snapshot) => {
        this.unsubscribe?.();
        this.logger.debug({ client: this.id, version: snapshot.version }, 'client subscribed');
        this.unsubscribe = this.control.hub.onChange((params) => this.push(params));
      },
      sendProgress: (token, value) => {
        this.rpc.sendProgress(FlushTelemetry.progress, token, value).catch(() => undefined);
      },
    };
  }

  private push(params: ChangedParams): void {
    this.rpc.sendNotification(Changed.type, params).catch(() => undefined);
  }

  // Counted where frames arrive, not where handlers start: vscode-jsonrpc queues what it receives
  // and handles one message per turn of the event loop, so a flood would pile up in its queue.
  private received(): void {
    this.inFlight += 1;
    if (!this.paused && this.inFlight > this.limits.maxInFlight) {
      // Stop reading: what the client sends next waits in its own socket buffer, not in our memory.
      this.paused = true;
      this.ws.pause();
    }
  }

  private answered(): void {
    this.inFlight -= 1;
    if (this.paused && this.inFlight <= this.limits.maxInFlight / 2) {
      this.paused = false;
      // A fresh round: a pong sent while the agent did not read still waits in the socket.
      this.alive = true;
      this.ws.resume();
    }
  }

  private drop(reason: string): void {
    if (this.closed) return;
    this.logger.warn({ client: this.id, reason }, 'client dropped');
    // Terminate, not close: a close frame would queue behind the data the client is not reading.
    this.ws.terminate();
    this.dispose();
  }

  private dispose(): void {
    if (this.closed) return;
    this.closed = true;
    // Frames still buffered from a dropped client are discarded, not parsed and queued.
    this.ws.removeAllListeners('message');
    this.unsubscribe?.();
    this.unsubscribe = null;
    this.flow.dispose();
    this.rpc.dispose();
  }
}
