// JSON-RPC over a WebSocket: one text frame carries one message, so there is no Content-Length
// framing to parse. The socket itself is not imported here (the agent, the CLI and the extension each
// own theirs); whoever owns it calls `receive` for every text frame and hands the writer a `send`.
import {
  AbstractMessageReader,
  AbstractMessageWriter,
  Disposable,
  ErrorCodes,
  type DataCallback,
  type Message,
  type MessageReader,
  type MessageWriter,
} from 'vscode-jsonrpc';

export type ParsedMessage = { ok: true; message: Message } | { ok: false; code: number; error: string };

/**
 * Parses one frame. vscode-jsonrpc answers nothing to a message it cannot classify, so the transport
 * rejects malformed JSON, batches and shapeless objects itself with the JSON-RPC error to send back.
 */
export function parseMessage(text: string): ParsedMessage {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { ok: false, code: ErrorCodes.ParseError, error: `parse error: not valid JSON (${(err as Error).message})` };
  }
  if (Array.isArray(value)) return { ok: false, code: ErrorCodes.InvalidRequest, error: 'invalid request: batches are not supported' };
  if (typeof value !== 'object' || value === null)
    return { ok: false, code: ErrorCodes.InvalidRequest, error: 'invalid request: a message must be a JSON object' };
  const record = value as Record<string, unknown>;
  if (record.jsonrpc !== '2.0') return { ok: false, code: ErrorCodes.InvalidRequest, error: 'invalid request: "jsonrpc" must be "2.0"' };
  const id = record.id;
  const validId = id === undefined || id === null || typeof id === 'string' || (typeof id === 'number' && Number.isFinite(id));
  if (!validId) return { ok: false, code: ErrorCodes.InvalidRequest, error: 'invalid request: "id" must be a string or a number' };
  const isRequestOrNotification = typeof record.method === 'string';
  const isResponse = id !== undefined && ('result' in record || 'error' in record);
  if (!isRequestOrNotification && !isResponse) {
    return { ok: false, code: ErrorCodes.InvalidRequest, error: 'invalid request: neither a request, a notification nor a response' };
  }
  return { ok: true, message: value as Message };
}

/** The JSON-RPC error response for a frame that `parseMessage` refused (its id is unknown: null). */
export function errorResponseText(code: number, message: string): string {
  return JSON.stringify({ jsonrpc: '2.0', id: null, error: { code, message } });
}

export class TextMessageReader extends AbstractMessageReader implements MessageReader {
  private callback: DataCallback | null = null;
  private readonly early: Message[] = [];

  /**
   * @param onInvalid what to do with a frame that is not a JSON-RPC message (the agent answers with
   * an error response; a client reports it).
   */
  constructor(private readonly onInvalid: (code: number, error: string) => void) {
    super();
  }

  listen(callback: DataCallback): Disposable {
    this.callback = callback;
    // Frames that arrived before the connection started listening are not lost.
    for (const message of this.early.splice(0)) callback(message);
    return Disposable.create(() => {
      this.callback = null;
    });
  }

  /** Hands one frame to the connection; returns the message, or undefined when it was refused. */
  receive(text: string): Message | undefined {
    const parsed = parseMessage(text);
    if (!parsed.ok) {
      this.onInvalid(parsed.code, parsed.error);
      return undefined;
    }
    if (this.callback) this.callback(parsed.message);
    else this.early.push(parsed.message);
    return parsed.message;
  }

  closed(): void {
    this.fireClose();
  }

  failed(error: Error): void {
    this.fireError(error);
  }
}

export class TextMessageWriter extends AbstractMessageWriter implements MessageWriter {
  private errorCount = 0;

  /**
   * @param send writes one text frame; rejects when the socket cannot take it.
   * @param onWrite sees each message as it is written (the agent counts its answers with it).
   */
  constructor(
    private readonly send: (text: string) => Promise<void>,
    private readonly onWrite?: (message: Message) => void,
  ) {
    super();
  }

  async write(message: Message): Promise<void> {
    this.onWrite?.(message);
    try {
      await this.send(JSON.stringify(message));
    } catch (err) {
      this.errorCount += 1;
      this.fireError(err, message, this.errorCount);
      throw err;
    }
  }

  end(): void {
    // The socket's owner closes it; nothing is buffered here.
  }

  closed(): void {
    this.fireClose();
  }
}
