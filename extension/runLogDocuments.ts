import * as vscode from 'vscode';
import { ReadLog, type LogChunk } from '../shared/protocol';
import type { AgentSession } from './agentSession';

export const RUN_LOG_SCHEME = 'quantilica-log';

/** The tab shows the fetcher and a short run id: `comex · 1a2b3c4d.log`; the path's first part is the run id. */
export function runLogUri(runId: string, fetcher: string): vscode.Uri {
  const short = runId.split('-').at(-1) ?? runId;
  return vscode.Uri.from({ scheme: RUN_LOG_SCHEME, path: `/${runId}/${fetcher} · ${short}.log` });
}

function runIdOf(uri: vscode.Uri): string {
  return uri.path.split('/')[1] ?? '';
}

/** Each answer waits this long for new bytes before the follower asks again. */
const WAIT_MS = 10_000;
/** The most a document keeps (the agent caps the log itself; this bounds the editor's copy). */
const MAX_DOCUMENT_CHARS = 4 * 1024 * 1024;

interface Followed {
  text: string;
  offset: number;
  ended: boolean;
  status: string;
  /** Stops the read loop (the document was closed or the extension stops). */
  stopped: boolean;
  loop: Promise<void> | null;
}

/**
 * Read-only documents with a run's log that grow while the fetcher writes: each open document follows
 * its run through `quantilica/readLog` (the agent holds each answer until bytes arrive, so this costs
 * one request per chunk, capped in size and rate by the agent) from the byte offset it has, which
 * also resumes a follow after a reconnect. Closing the document stops following; reopening starts
 * afresh, so a log is never stale.
 */
export class RunLogDocuments implements vscode.TextDocumentContentProvider, vscode.Disposable {
  private readonly emitter = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.emitter.event;
  private readonly followed = new Map<string, Followed>();
  private readonly subscriptions: vscode.Disposable[];

  constructor(private readonly session: AgentSession, private readonly log: vscode.LogOutputChannel) {
    this.subscriptions = [
      vscode.workspace.onDidCloseTextDocument((doc) => {
        if (doc.uri.scheme !== RUN_LOG_SCHEME) return;
        const f = this.followed.get(doc.uri.toString());
        if (f) f.stopped = true;
        this.followed.delete(doc.uri.toString());
      }),
      // After a reconnect, open logs continue from their offset.
      session.onDidChangeState((state) => {
        if (state.kind !== 'connected') return;
        for (const [key, f] of this.followed) if (!f.ended && !f.loop) this.follow(vscode.Uri.parse(key), f);
      }),
    ];
  }

  /** What the document shows now (tests read it through the API). */
  followState(uri: vscode.Uri): { ended: boolean; bytes: number } | undefined {
    const f = this.followed.get(uri.toString());
    return f ? { ended: f.ended, bytes: f.offset } : undefined;
  }

  async provideTextDocumentContent(uri: vscode.Uri): Promise<string> {
    const key = uri.toString();
    let f = this.followed.get(key);
    if (!f) {
      const first = await this.read(uri, 0, 0);
      f = { text: '', offset: 0, ended: false, status: first.status, stopped: false, loop: null };
      this.append(f, first);
      this.followed.set(key, f);
      if (!f.ended) this.follow(uri, f);
    }
    return f.text + (f.ended ? `\n— ${f.status}: end of log —\n` : '');
  }

  dispose(): void {
    for (const f of this.followed.values()) f.stopped = true;
    this.followed.clear();
    for (const d of this.subscriptions) d.dispose();
    this.emitter.dispose();
  }

  private read(uri: vscode.Uri, offset: number, waitMs: number): Promise<LogChunk> {
    return this.session.client().sendRequest<ReadLog.Result>(ReadLog.method, { runId: runIdOf(uri), offset, waitMs } satisfies ReadLog.Params);
  }

  private append(f: Followed, chunk: LogChunk): void {
    f.text += chunk.text;
    if (f.text.length > MAX_DOCUMENT_CHARS) f.text = `… (earlier lines dropped)\n${f.text.slice(f.text.length - MAX_DOCUMENT_CHARS)}`;
    f.offset = chunk.nextOffset;
    f.ended = chunk.ended;
    f.status = chunk.status;
  }

  private follow(uri: vscode.Uri, f: Followed): void {
    f.loop = (async () => {
      while (!f.stopped && !f.ended) {
        let chunk: LogChunk;
        try {
          chunk = await this.read(uri, f.offset, WAIT_MS);
        } catch (err) {
          // Disconnected: the state listener resumes from f.offset once the agent is back.
          this.log.info(`stopped following ${runIdOf(uri)}: ${err instanceof Error ? err.message : String(err)}`);
          return;
        }
        if (f.stopped) return;
        const changed = chunk.text.length > 0 || chunk.ended !== f.ended;
        this.append(f, chunk);
        if (changed) this.emitter.fire(uri);
      }
    })().finally(() => { f.loop = null; });
  }
}
