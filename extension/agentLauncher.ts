import * as path from 'node:path';
import * as vscode from 'vscode';
import { launchAgent, stopAgent } from './agentProcess';
import type { AgentSession } from './agentSession';
import type { Notices } from './notices';
import { reportError } from './reportError';

// A busy station (a burst of fetchers starting, a flush) can take tens of seconds to start the agent:
// a restart measured 29.6 s under a load average of 12, so the wait leaves room beyond that.
const READY_TIMEOUT_MS = 60_000;

/** Starts and restarts the agent the extension ships (`dist/agent.js`), then waits for the session. */
export class AgentLauncher {
  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly session: AgentSession,
    private readonly log: vscode.LogOutputChannel,
    private readonly notices: Notices,
  ) {}

  get logFile(): string {
    return path.join(this.context.globalStorageUri.fsPath, 'agent.log');
  }

  /** Starts an agent unless one is connected; resolves with its pid once the session is connected. */
  async start(): Promise<number | undefined> {
    const state = this.session.state;
    if (state.kind === 'connected') {
      void vscode.window.showInformationMessage(`The Quantilica agent is running (pid ${state.info.pid}).`);
      return state.info.pid;
    }
    return this.launchAndWait('Starting the Quantilica agent');
  }

  /** Stops the connected agent (its fetchers go on and are adopted) and starts a new one. */
  async restart(): Promise<number | undefined> {
    return this.notices.withProgress('Restarting the Quantilica agent', async (report) => {
      const state = this.session.state;
      if (state.kind === 'connected') {
        this.log.info(`stopping the agent (pid ${state.info.pid})`);
        report(`stopping pid ${state.info.pid} (its fetchers go on)…`);
        this.restarting = true;
        this.session.stoppingOnPurpose = true;
        try {
          await stopAgent(state.info.pid);
        } catch (err) {
          this.session.stoppingOnPurpose = false;
          reportError(this.log, 'Quantilica: the agent did not stop.', err);
          return undefined;
        } finally {
          this.restarting = false;
        }
      }
      report('starting a new agent…');
      const pid = await this.launchAndWait();
      if (pid !== undefined) report(`connected to the new agent (pid ${pid})`);
      return pid;
    });
  }

  /** True while this window stops the agent on purpose (no "agent stopped" notification then). */
  restarting = false;

  private launchAndWait(title?: string): Thenable<number | undefined> {
    return title ? this.notices.withProgress(title, () => this.launch()) : this.launch();
  }

  private async launch(): Promise<number | undefined> {
    const agentJs = this.context.asAbsolutePath(path.join('dist', 'agent.js'));
    const nodePath = vscode.workspace.getConfiguration('quantilica').get<string>('agent.nodePath', 'node') || 'node';
    let agentExited: (err: Error) => void = () => undefined;
    const exitedEarly = new Promise<never>((_resolve, reject) => {
      agentExited = reject;
    });
    // An exit after the agent connected is the session's business (it reconnects), not this wait's.
    exitedEarly.catch(() => undefined);
    try {
      const pid = await launchAgent({ agentJs, nodePath, logFile: this.logFile }, (code, logTail) => {
        // Exit 0 is an agent that was told to stop (Restart Agent, a SIGTERM): not a warning.
        if (code === 0) this.log.info(`agent exited (code 0); its log is ${this.logFile}`);
        else this.log.warn(`agent exited (code ${code ?? 'null'}); its log is ${this.logFile}`);
        agentExited(new Error(`the agent exited with code ${code ?? 'null'}:\n${logTail}`));
      });
      this.log.info(`started the agent: ${nodePath} ${agentJs} agent (pid ${pid}); its log is ${this.logFile}`);
      this.session.reconnectNow();
      await Promise.race([this.session.whenConnected(READY_TIMEOUT_MS), exitedEarly]);
      return pid;
    } catch (err) {
      reportError(this.log, 'Quantilica: the agent did not start.', err);
      return undefined;
    }
  }
}
