import * as vscode from 'vscode';
import type { AgentLauncher } from './agentLauncher';
import type { AgentSession } from './agentSession';
import type { Notices } from './notices';
import { outcome } from './runPresentation';

/**
 * Notifications for what an operator must know without looking: a run failed (with "Show Log"), the
 * disk gate paused or resumed, the agent stopped. Each kind can be switched off in the settings.
 */
export function watchEvents(session: AgentSession, notices: Notices, launcher: AgentLauncher): vscode.Disposable {
  let wasConnected = false;
  const subscriptions = [
    session.onDidChange((event) => {
      if (event.kind !== 'change') return;
      const change = event.params.change;
      if (change.kind === 'run' && change.run.status === 'failed') {
        const before = event.before.runs.find((r) => r.runId === change.run.runId);
        if (before?.status === 'failed') return;
        const run = change.run;
        void notices.maybe('failedRuns', 'error', `Quantilica: ${run.fetcher} failed (${outcome(run)}).`, 'Show Log').then((choice) => {
          if (choice === 'Show Log') void vscode.commands.executeCommand('quantilica.showRunLog', run.runId);
        });
      }
      if (change.kind === 'disk') {
        const was = event.before.disk?.state;
        const free = change.disk.freeGb === null ? 'unknown' : `${change.disk.freeGb.toFixed(1)} GB`;
        if (change.disk.state === 'paused' && was !== 'paused') {
          void notices.maybe('diskGate', 'warning', `Quantilica: the disk gate paused new fetchers: ${free} free, below ${change.disk.pauseGb} GB. They start again at ${change.disk.resumeGb} GB.`);
        } else if (was === 'paused' && change.disk.state !== 'paused') {
          void notices.maybe('diskGate', 'info', `Quantilica: the disk gate resumed: ${free} free.`);
        }
      }
    }),
    session.onDidChangeState((state) => {
      if (state.kind === 'connected') {
        wasConnected = true;
        return;
      }
      if (state.kind === 'down' && wasConnected) {
        wasConnected = false;
        if (launcher.restarting) return;
        void notices.maybe('agentStopped', 'warning', 'Quantilica: the agent stopped. The extension reconnects by itself when it runs again.', 'Start Agent').then((choice) => {
          if (choice === 'Start Agent') void launcher.start();
        });
      }
    }),
  ];
  return vscode.Disposable.from(...subscriptions);
}
