import * as vscode from 'vscode';
import { TailLog } from '../shared/protocol';
import type { AgentSession } from './agentSession';

export const RUN_LOG_SCHEME = 'quantilica-log';

export function runLogUri(runId: string): vscode.Uri {
  return vscode.Uri.from({ scheme: RUN_LOG_SCHEME, path: `/${runId}.log` });
}

/**
 * Read-only documents with the tail of a run's log, fetched through the protocol (`quantilica/tailLog`),
 * so the log shows wherever the agent runs and whatever the file's permissions.
 */
export class RunLogDocuments implements vscode.TextDocumentContentProvider {
  constructor(private readonly session: AgentSession) {}

  async provideTextDocumentContent(uri: vscode.Uri): Promise<string> {
    const runId = uri.path.replace(/^\//, '').replace(/\.log$/, '');
    const tail = await this.session.client().sendRequest<TailLog.Result>(TailLog.method, { runId } satisfies TailLog.Params);
    return `${tail.truncated ? `… (last bytes of ${tail.path})\n` : ''}${tail.text}`;
  }
}
