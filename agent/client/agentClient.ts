import { createMessageConnection, type MessageConnection } from 'vscode-jsonrpc';
import { WebSocket, type RawData } from 'ws';
import {
  CancelRun,
  Changed,
  FlushTelemetry,
  GetMetrics,
  GetSnapshot,
  Hello,
  ListEvents,
  ListRuns,
  ReadLog,
  PROTOCOL_VERSION,
  RunFetcher,
  SetSchedulePaused,
  TailLog,
  WaitRun,
  type ChangedParams,
  type ConnectionInfo,
  type FlushProgress,
  type RunInfo,
  type RunTrigger,
  type ScheduleStatus,
  type Snapshot,
} from '../../shared/protocol';
import { StateTracker } from '../../shared/stateTracker';
import { TextMessageReader, TextMessageWriter } from '../../shared/textMessageTransport';
import { readLiveConnectionFile } from '../../shared/node/connectionFile';
import { openAgentSocket } from '../../shared/node/agentSocket';
import { wsText } from '../../shared/node/wsText';

export interface ConnectOptions {
  /** Who is connecting, for the agent's log (`quantilica-cli`, `bench`, …). */
  client: string;
  /** Give up on the WebSocket handshake after this long (default 5 s). */
  handshakeTimeoutMs?: number;
}

export type ClientEvent =
  | { kind: 'change'; params: ChangedParams; snapshot: Snapshot }
  /** The state was replaced by a fresh snapshot after a gap in versions. */
  | { kind: 'resync'; snapshot: Snapshot };

/** Frames from the agent: snapshots with many runs are large, unlike what clients send. */
const CLIENT_MAX_PAYLOAD = 64 * 1024 * 1024;

/**
 * A connection to a running agent: typed requests, and a copy of the agent's state kept current by
 * the ordered change stream (gaps resynchronise from a snapshot, duplicates are ignored).
 */
export class AgentClient {
  private readonly tracker = new StateTracker();
  private readonly listeners = new Set<(event: ClientEvent) => void>();
  private readonly closeListeners = new Set<(code: number, reason: string) => void>();
  private flushSeq = 0;

  private constructor(
    readonly info: ConnectionInfo,
    private readonly ws: WebSocket,
    private readonly rpc: MessageConnection,
  ) {}

  /** Opens the socket, says hello and starts tracking state; `info` comes from the connection file. */
  static async open(info: ConnectionInfo, opts: ConnectOptions): Promise<AgentClient> {
    const ws = await openAgentSocket(info, { handshakeTimeoutMs: opts.handshakeTimeoutMs ?? 5000, maxPayload: CLIENT_MAX_PAYLOAD });
    const reader = new TextMessageReader((_code, error) => reader.failed(new Error(`the agent sent a bad frame: ${error}`)));
    const writer = new TextMessageWriter(
      (text) => new Promise((resolve, reject) => ws.send(text, (err) => (err ? reject(err) : resolve()))),
    );
    ws.on('message', (data: RawData) => reader.receive(wsText(data)));
    const rpc = createMessageConnection(reader, writer);
    const client = new AgentClient(info, ws, rpc);
    ws.on('close', (code: number, reason: Buffer) => {
      reader.closed();
      rpc.dispose();
      for (const listener of client.closeListeners) listener(code, reason.toString('utf8'));
    });
    rpc.onNotification(Changed.type, (params) => client.changed(params));
    rpc.listen();
    const hello = await rpc.sendRequest(Hello.type, { protocolVersion: PROTOCOL_VERSION, client: opts.client });
    client.reset(hello.snapshot);
    return client;
  }

  /** The agent's state as of the last change received. */
  get snapshot(): Snapshot {
    const snapshot = this.tracker.snapshot;
    if (snapshot === null) throw new Error('no snapshot yet');
    return snapshot;
  }

  onChanged(listener: (event: ClientEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  onClose(listener: (code: number, reason: string) => void): () => void {
    this.closeListeners.add(listener);
    return () => this.closeListeners.delete(listener);
  }

  getSnapshot(): Promise<Snapshot> {
    return this.rpc.sendRequest(GetSnapshot.type);
  }

  async run(fetcher: string, args: string[] = [], trigger: Extract<RunTrigger, 'cli' | 'protocol'> = 'protocol'): Promise<RunInfo> {
    const result = await this.rpc.sendRequest(RunFetcher.type, { fetcher, args, trigger });
    return result.run;
  }

  async waitRun(runId: string): Promise<RunInfo> {
    return (await this.rpc.sendRequest(WaitRun.type, { runId })).run;
  }

  async cancel(target: CancelRun.Params): Promise<RunInfo[]> {
    return (await this.rpc.sendRequest(CancelRun.type, target)).cancelled;
  }

  async listRuns(limit?: number): Promise<RunInfo[]> {
    return (await this.rpc.sendRequest(ListRuns.type, limit === undefined ? {} : { limit })).runs;
  }

  tailLog(runId: string, maxBytes?: number): Promise<TailLog.Result> {
    return this.rpc.sendRequest(TailLog.type, maxBytes === undefined ? { runId } : { runId, maxBytes });
  }

  /** A run's log from a byte offset; the agent holds the answer up to `waitMs` for new bytes. */
  readLog(params: ReadLog.Params): Promise<ReadLog.Result> {
    return this.rpc.sendRequest(ReadLog.type, params);
  }

  /** Flushes the spool; `onProgress` sees the agent's work-done progress (begin, reports, end). */
  async flush(onProgress?: (progress: FlushProgress) => void): Promise<FlushTelemetry.Result> {
    if (!onProgress) return this.rpc.sendRequest(FlushTelemetry.type, {});
    const workDoneToken = `flush-${process.pid}-${++this.flushSeq}`;
    const subscription = this.rpc.onProgress(FlushTelemetry.progress, workDoneToken, onProgress);
    try {
      return await this.rpc.sendRequest(FlushTelemetry.type, { workDoneToken });
    } finally {
      subscription.dispose();
    }
  }

  async setSchedulePaused(paused: boolean, fetcher?: string): Promise<ScheduleStatus> {
    const params: SetSchedulePaused.Params = fetcher === undefined ? { paused } : { paused, fetcher };
    return (await this.rpc.sendRequest(SetSchedulePaused.type, params)).schedule;
  }

  listEvents(params: ListEvents.Params = {}): Promise<ListEvents.Result> {
    return this.rpc.sendRequest(ListEvents.type, params);
  }

  metrics(): Promise<GetMetrics.Result> {
    return this.rpc.sendRequest(GetMetrics.type);
  }

  /** Closes the socket and waits until it is closed. */
  close(): Promise<void> {
    if (this.ws.readyState === WebSocket.CLOSED) return Promise.resolve();
    return new Promise((resolve) => {
      this.ws.once('close', () => resolve());
      this.ws.close(1000, 'client done');
    });
  }

  private changed(params: ChangedParams): void {
    const outcome = this.tracker.apply(params);
    if (outcome.kind === 'applied') this.emit({ kind: 'change', params, snapshot: outcome.snapshot });
    else if (outcome.kind === 'gap') void this.resync();
  }

  private async resync(): Promise<void> {
    try {
      this.reset(await this.getSnapshot());
    } catch {
      // The connection is going away; its close listeners report that.
    }
  }

  private reset(snapshot: Snapshot): void {
    // Held changes newer than the snapshot are applied inside it; listeners see the result once.
    const { gap } = this.tracker.reset(snapshot);
    this.emit({ kind: 'resync', snapshot: this.snapshot });
    if (gap) void this.resync();
  }

  private emit(event: ClientEvent): void {
    for (const listener of this.listeners) listener(event);
  }
}

/**
 * Reads and checks the connection file (see `readConnectionFile`), checks that the process it names
 * is the live agent that wrote it (a `stale` ConnectionFileError otherwise), then connects.
 */
export async function connectAgent(connectionFile: string, opts: ConnectOptions): Promise<AgentClient> {
  return AgentClient.open(await readLiveConnectionFile(connectionFile), opts);
}
