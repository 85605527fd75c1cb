import * as vscode from 'vscode';
import { ReadLog, type LogChunk } from '../shared/protocol';
import type { AgentSession } from './agentSession';
import { sendRequest } from './protocolCalls';

export const RUN_LOG_SCHEME = 'quantilica-log';

/** The tab shows the fetcher and a short run id: `comex · 1a2b3c4d.log`; the path's first part is the run id. */
export function runLogUri(runId: string, fetcher: string): vscode.Uri {
  const short = runId.split('-').at(-1) ?? runId;
  return vscode.Uri.from({ scheme: RUN_LOG_SCHEME, path: `/${runId}/${fetcher} · ${short}.log` });
}

/** The cursor is on the last line (where Ctrl+End puts it): the editor follows the tail. */
export function atEnd(editor: vscode.TextEditor): boolean {
  return editor.selection.isEmpty && editor.selection.active.line >= editor.document.lineCount - 1;
}

/** Puts the cursor at the end of the document and scrolls it into view. */
export function moveToEnd(editor: vscode.TextEditor): void {
  const end = editor.document.lineAt(editor.document.lineCount - 1).range.end;
  editor.selection = new vscode.Selection(end, end);
  editor.revealRange(new vscode.Range(end, end), vscode.TextEditorRevealType.Default);
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
  /**
   * The editors that follow their log's tail. Decided when the text changes, from where the cursor is
   * against where the new text went in, never from a look taken when a chunk came: the extension host
   * sees the document and the cursor a step behind the window, and a chunk can come before the editor
   * is moved to the end, or two can come for one change.
   */
  private readonly following = new WeakSet<vscode.TextEditor>();

  constructor(
    private readonly session: AgentSession,
    private readonly log: vscode.LogOutputChannel,
  ) {
    this.subscriptions = [
      vscode.workspace.onDidCloseTextDocument((doc) => {
        if (doc.uri.scheme !== RUN_LOG_SCHEME) return;
        const f = this.followed.get(doc.uri.toString());
        if (f) f.stopped = true;
        this.followed.delete(doc.uri.toString());
      }),
      // Follow the tail as the Output panel does: an editor whose cursor was at the end stays there.
      vscode.workspace.onDidChangeTextDocument((e) => {
        if (e.document.uri.scheme !== RUN_LOG_SCHEME || e.contentChanges.length === 0) return;
        // New text goes in at the old end: a cursor on that line or below was at the end.
        const oldEnd = Math.min(...e.contentChanges.map((c) => c.range.start.line));
        for (const editor of vscode.window.visibleTextEditors) {
          if (editor.document !== e.document || !this.following.has(editor)) continue;
          if (editor.selection.isEmpty && editor.selection.active.line >= oldEnd) moveToEnd(editor);
          else this.following.delete(editor);
        }
      }),
      // Ctrl+End (or a click on the last line) starts following again.
      vscode.window.onDidChangeTextEditorSelection((e) => {
        if (e.textEditor.document.uri.scheme === RUN_LOG_SCHEME && atEnd(e.textEditor)) this.following.add(e.textEditor);
      }),
      // After a reconnect, open logs continue from their offset.
      session.onDidChangeState((state) => {
        if (state.kind !== 'connected') return;
        for (const [key, f] of this.followed) if (!f.ended && !f.loop) this.follow(vscode.Uri.parse(key), f);
      }),
    ];
  }

  /** Puts the editor's cursor at the end of its log and keeps it there while lines come. */
  followTail(editor: vscode.TextEditor): void {
    this.following.add(editor);
    moveToEnd(editor);
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
    return sendRequest(this.session.client(), ReadLog.type, { runId: runIdOf(uri), offset, waitMs });
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
    })().finally(() => {
      f.loop = null;
    });
  }
}
