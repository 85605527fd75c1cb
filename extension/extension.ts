import * as os from 'node:os';
import * as path from 'node:path';
import * as vscode from 'vscode';
import { AgentLauncher } from './agentLauncher';
import { AgentSession } from './agentSession';
import { registerCommands } from './commands';
import { DiskStatusItem, gaugeState } from './diskStatusItem';
import { PoolTreeProvider } from './poolTreeProvider';
import { reportError } from './reportError';
import { RUN_LOG_SCHEME, RunLogDocuments } from './runLogDocuments';

/** What `activate` returns: the extension-host tests read the live state through it. */
export interface QuantilicaApi {
  readonly session: AgentSession;
  readonly tree: PoolTreeProvider;
  readonly disk: DiskStatusItem;
  /** Milliseconds `activate` took. */
  readonly activationMs: number;
}

export function activate(context: vscode.ExtensionContext): QuantilicaApi | undefined {
  const started = Date.now();
  const log = vscode.window.createOutputChannel('Quantilica', { log: true });
  context.subscriptions.push(log);
  try {
    const session = new AgentSession(log, connectionFile);
    const tree = new PoolTreeProvider();
    const disk = new DiskStatusItem();
    const launcher = new AgentLauncher(context, session, log);
    const view = vscode.window.createTreeView('quantilica.pools', { treeDataProvider: tree, showCollapseAll: true });
    context.subscriptions.push(session, tree, disk, view, ...registerCommands(session, launcher, log));
    context.subscriptions.push(vscode.workspace.registerTextDocumentContentProvider(RUN_LOG_SCHEME, new RunLogDocuments(session)));

    const renderGauge = () => disk.set(gaugeState(session.state, session.snapshot?.disk, session.snapshot?.spool));
    context.subscriptions.push(
      session.onDidChange((event) => {
        tree.update(event);
        if (event.kind === 'reset' || event.params.change.kind === 'disk' || event.params.change.kind === 'spool') renderGauge();
      }),
      session.onDidChangeState((state) => {
        void vscode.commands.executeCommand('setContext', 'quantilica.agentState', state.kind);
        view.message = state.kind === 'down' ? undefined : state.kind === 'connecting' ? 'Connecting to the agent…' : undefined;
        renderGauge();
      }),
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (e.affectsConfiguration('quantilica.connectionFile')) session.reconnectNow();
      }),
    );
    void vscode.commands.executeCommand('setContext', 'quantilica.agentState', 'connecting');
    session.start();

    if (vscode.workspace.getConfiguration('quantilica').get<boolean>('autoStart', false)) {
      // Give an agent that is already running the first word; start ours only if none answers.
      session.whenConnected(3000).catch(() => launcher.start());
    }
    return { session, tree, disk, activationMs: Date.now() - started };
  } catch (err) {
    reportError(log, 'Quantilica: the extension failed to start.', err);
    return undefined;
  }
}

export function deactivate(): void {
  // Everything is in context.subscriptions; the agent itself keeps running, it is the user's.
}

/**
 * Where the agent's port and token are: the setting, else what the agent itself would use
 * (QUANTILICA_CONNECTION_FILE, QUANTILICA_HOME/agent.json, ~/.quantilica/agent.json).
 */
function connectionFile(): string {
  const home = process.env.HOME && process.env.HOME.length > 0 ? process.env.HOME : os.homedir();
  const expand = (p: string) => (p === '~' ? home : p.startsWith('~/') ? path.join(home, p.slice(2)) : p);
  const configured = vscode.workspace.getConfiguration('quantilica').get<string>('connectionFile', '').trim();
  if (configured) return expand(configured);
  if (process.env.QUANTILICA_CONNECTION_FILE) return expand(process.env.QUANTILICA_CONNECTION_FILE);
  if (process.env.QUANTILICA_HOME) return path.join(expand(process.env.QUANTILICA_HOME), 'agent.json');
  return path.join(home, '.quantilica', 'agent.json');
}
