import * as vscode from 'vscode';
import type { AgentSession } from './agentSession';
import { diskMarkdown } from './diskStatusItem';

export const SHOW_DETAILS_COMMAND_ID = 'quantilica.showDiskDetails';
export const DISK_DETAILS_SCHEME = 'quantilica-disk';
export const DISK_DETAILS_URI = vscode.Uri.from({ scheme: DISK_DETAILS_SCHEME, path: '/Disk gate.md' });

/**
 * The gauge's details as a read-only virtual document (rendered as a Markdown preview): nothing to
 * save, so closing it asks nothing; it updates with every disk or spool change.
 */
export class DiskDetailsDocument implements vscode.TextDocumentContentProvider, vscode.Disposable {
  private readonly emitter = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.emitter.event;

  constructor(private readonly session: AgentSession) {}

  provideTextDocumentContent(): string {
    const snapshot = this.session.snapshot;
    if (!snapshot) return '**Disk gate**: no agent is connected; the extension reconnects by itself when one starts.';
    return snapshot.disk ? diskMarkdown(snapshot.disk, snapshot.spool) : '**Disk gate**: the agent reports no disk status.';
  }

  changed(): void {
    this.emitter.fire(DISK_DETAILS_URI);
  }

  dispose(): void {
    this.emitter.dispose();
  }
}

/** Opens the details as a Markdown preview; where no preview exists, as the read-only document. */
export async function showDiskDetails(): Promise<void> {
  try {
    await vscode.commands.executeCommand('markdown.showPreview', DISK_DETAILS_URI);
    return;
  } catch {
    // No Markdown extension in this host.
  }
  const doc = await vscode.workspace.openTextDocument(DISK_DETAILS_URI);
  await vscode.window.showTextDocument(doc, { preview: true });
}
