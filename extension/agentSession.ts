import * as fs from 'node:fs';
import * as path from 'node:path';
import * as vscode from 'vscode';
import { CloseAction, ErrorAction, LanguageClient, RevealOutputChannelOn } from 'vscode-languageclient/node';
import { Changed, GetSnapshot, Hello, PROTOCOL_VERSION, type ChangedParams, type ConnectionInfo, type Snapshot } from '../shared/protocol';
import { StateTracker } from '../shared/stateTracker';
import { openAgentTransport } from './agentTransport';
import { onNotification, sendRequest, sendRequest0 } from './protocolCalls';

export type SessionState =
  | { kind: 'connecting' }
  | { kind: 'connected'; info: ConnectionInfo }
  /** No agent answers; `reason` says why, `nextAttemptMs` when the session tries again. */
  | { kind: 'down'; reason: string; nextAttemptMs: number };

export type StateEvent =
  | { kind: 'change'; params: ChangedParams; before: Snapshot; after: Snapshot }
  /** The whole state was replaced (connected, resynchronised) or is gone (null: disconnected). */
  | { kind: 'reset'; snapshot: Snapshot | null };

/** Thrown by `client()` while no agent is connected; commands turn it into "start the agent?". */
export class AgentDownError extends Error {
  constructor(readonly reason: string) {
    super(`the Quantilica agent is not connected: ${reason}`);
    this.name = 'AgentDownError';
  }
}

const BACKOFF_MS = [250, 500, 1000, 2000, 4000, 8000, 10_000];

/**
 * Owns the connection to the agent, as rust-analyzer's Ctx does: the extension's disposables live as
 * long as the extension, the connection's (`connectionScope`) are dropped on every reconnect. It
 * keeps the agent's state with the shared StateTracker, so a reconnect or a gap in versions
 * resynchronises from a snapshot and nothing is applied twice.
 */
export class AgentSession implements vscode.Disposable {
  private readonly tracker = new StateTracker();
  private readonly stateEmitter = new vscode.EventEmitter<SessionState>();
  private readonly changeEmitter = new vscode.EventEmitter<StateEvent>();
  readonly onDidChangeState = this.stateEmitter.event;
  readonly onDidChange = this.changeEmitter.event;
  private languageClient: LanguageClient | null = null;
  private connectionScope: vscode.Disposable[] = [];
  private current: SessionState = { kind: 'connecting' };
  private attempt = 0;
  private retryTimer: NodeJS.Timeout | null = null;
  private watcher: fs.FSWatcher | null = null;
  private connecting = false;
  /** A reason to try again came while an attempt was under way (a new connection file). */
  private tryAgain = false;
  private disposed = false;

  constructor(
    private readonly log: vscode.LogOutputChannel,
    private readonly connectionFile: () => string,
  ) {}

  get state(): SessionState {
    return this.current;
  }

  get snapshot(): Snapshot | null {
    return this.tracker.snapshot;
  }

  start(): void {
    this.watchConnectionFile();
    void this.connect();
  }

  /** The language client while connected; otherwise AgentDownError with the reason. */
  client(): LanguageClient {
    if (this.current.kind === 'connected' && this.languageClient) return this.languageClient;
    throw new AgentDownError(this.current.kind === 'down' ? this.current.reason : 'still connecting');
  }

  /** Try now instead of waiting for the backoff (the agent was just started, settings changed). */
  reconnectNow(): void {
    if (this.current.kind === 'connected') this.dropConnection('reconnecting on request');
    this.attempt = 0;
    this.clearRetry();
    this.watchConnectionFile();
    void this.connect();
  }

  /** Resolves when connected, or rejects after `timeoutMs` with the last reason. */
  whenConnected(timeoutMs: number): Promise<ConnectionInfo> {
    if (this.current.kind === 'connected') return Promise.resolve(this.current.info);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        sub.dispose();
        reject(new AgentDownError(this.current.kind === 'down' ? this.current.reason : `not connected after ${timeoutMs} ms`));
      }, timeoutMs);
      const sub = this.onDidChangeState((state) => {
        if (state.kind !== 'connected') return;
        clearTimeout(timer);
        sub.dispose();
        resolve(state.info);
      });
    });
  }

  dispose(): void {
    this.disposed = true;
    this.clearRetry();
    this.watcher?.close();
    this.dropConnection('the extension is shutting down');
    this.stateEmitter.dispose();
    this.changeEmitter.dispose();
  }

  private async connect(): Promise<void> {
    if (this.connecting) {
      this.tryAgain = true;
      return;
    }
    if (this.disposed || this.current.kind === 'connected') return;
    this.connecting = true;
    this.tryAgain = false;
    const file = this.connectionFile();
    try {
      const transport = await openAgentTransport(file);
      const client = new LanguageClient('quantilica', 'Quantilica agent', () => Promise.resolve(transport.transports), {
        documentSelector: [],
        outputChannel: this.log,
        revealOutputChannelOn: RevealOutputChannelOn.Never,
        // Reconnection is the session's job (backoff, connection-file watch), not the client's.
        errorHandler: {
          error: () => ({ action: ErrorAction.Continue, handled: true }),
          closed: () => ({ action: CloseAction.DoNotRestart, handled: true }),
        },
        initializationFailedHandler: () => false,
      });
      this.languageClient = client;
      this.connectionScope.push(
        onNotification(client, Changed.type, (params) => this.changed(params)),
        { dispose: () => transport.socket.terminate() },
      );
      transport.socket.once('close', (code: number, reason: Buffer) => {
        if (this.languageClient === client)
          this.lost(`the agent closed the connection (${code}${reason.length > 0 ? `: ${reason.toString('utf8')}` : ''})`);
      });
      await client.start();
      const hello = await sendRequest(client, Hello.type, { protocolVersion: PROTOCOL_VERSION, client: `vscode ${vscode.version}` });
      if (this.languageClient !== client) return;
      this.reset(hello.snapshot, client);
      this.attempt = 0;
      this.log.info(`connected to the agent (pid ${transport.info.pid}, port ${transport.info.port}, version ${hello.snapshot.version})`);
      this.setState({ kind: 'connected', info: transport.info });
    } catch (err) {
      const reason = err instanceof Error ? err.message : String(err);
      this.dropConnection(reason);
      if (this.tryAgain) this.attempt = 0;
      this.scheduleRetry(reason);
    } finally {
      this.connecting = false;
    }
  }

  private changed(params: ChangedParams): void {
    const before = this.tracker.snapshot;
    const outcome = this.tracker.apply(params);
    if (outcome.kind === 'applied' && before) {
      this.changeEmitter.fire({ kind: 'change', params, before, after: outcome.snapshot });
    } else if (outcome.kind === 'gap') {
      this.log.warn(`missed changes ${outcome.expected}..${outcome.received - 1}; fetching a snapshot`);
      void this.resync();
    }
  }

  private async resync(): Promise<void> {
    const client = this.languageClient;
    if (!client) return;
    try {
      this.reset(await sendRequest0(client, GetSnapshot.type), client);
    } catch (err) {
      this.log.warn(`resynchronising failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  private reset(snapshot: Snapshot, client: LanguageClient): void {
    const { gap } = this.tracker.reset(snapshot);
    this.changeEmitter.fire({ kind: 'reset', snapshot: this.tracker.snapshot });
    if (gap && this.languageClient === client) void this.resync();
  }

  /**
   * Set when this window stops the agent on purpose (Restart Agent): the loss that follows is
   * expected, an info line, not a warning. The loss consumes it.
   */
  stoppingOnPurpose = false;

  private lost(reason: string): void {
    if (this.stoppingOnPurpose) this.log.info(`disconnected while the agent stops on purpose: ${reason}`);
    else this.log.warn(`disconnected: ${reason}`);
    this.stoppingOnPurpose = false;
    this.dropConnection(reason);
    this.attempt = 0;
    this.scheduleRetry(reason);
  }

  private dropConnection(reason: string): void {
    const client = this.languageClient;
    this.languageClient = null;
    for (const d of this.connectionScope.splice(0)) d.dispose();
    // The socket is gone already; stop() would wait for a shutdown answer that cannot come.
    if (client) client.dispose(100).catch(() => undefined);
    if (this.tracker.snapshot !== null) {
      this.tracker.clear();
      this.changeEmitter.fire({ kind: 'reset', snapshot: null });
    }
    if (this.current.kind === 'connected') this.setState({ kind: 'down', reason, nextAttemptMs: 0 });
  }

  private scheduleRetry(reason: string): void {
    if (this.disposed) return;
    const delay = BACKOFF_MS[Math.min(this.attempt, BACKOFF_MS.length - 1)] ?? 10_000;
    this.attempt += 1;
    if (!this.watcher) this.watchConnectionFile();
    this.setState({ kind: 'down', reason, nextAttemptMs: delay });
    this.clearRetry();
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      void this.connect();
    }, delay);
  }

  private clearRetry(): void {
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
  }

  /** A new agent writes its connection file: try at once instead of at the end of the backoff. */
  private watchConnectionFile(): void {
    this.watcher?.close();
    this.watcher = null;
    const file = this.connectionFile();
    try {
      this.watcher = fs.watch(path.dirname(file), (_event, name) => {
        if (name === path.basename(file) && this.current.kind !== 'connected' && fs.existsSync(file)) {
          this.attempt = 0;
          this.clearRetry();
          void this.connect();
        }
      });
      this.watcher.on('error', () => {
        this.watcher?.close();
        this.watcher = null;
      });
    } catch {
      // The directory does not exist yet (no agent ever ran): the backoff polls instead.
    }
  }

  private setState(state: SessionState): void {
    const changed =
      state.kind !== this.current.kind || (state.kind === 'down' && this.current.kind === 'down' && state.reason !== this.current.reason);
    this.current = state;
    if (changed) this.stateEmitter.fire(state);
  }
}
