import * as vscode from 'vscode';
import type { Change, Snapshot } from '../shared/protocol';
import type { AgentLauncher } from './agentLauncher';
import type { AgentSession } from './agentSession';
import type { Notices } from './notices';
import { clockTime, endWords, gbWords } from '../shared/humanWords';

/**
 * Notifications for what an operator must know without looking: a run failed (with "Show Log"), a
 * run stalled, a scheduled fetcher is late, the disk gate paused or resumed, the agent stopped. Each
 * kind can be switched off in the settings.
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
        const how = endWords(run);
        void notices
          .maybe('failedRuns', 'error', `Quantilica: ${run.fetcher} failed${how ? ` (${how})` : ''}.`, 'Show Log')
          .then((choice) => {
            if (choice === 'Show Log') void vscode.commands.executeCommand('quantilica.showRunLog', run.runId);
          });
      }
      for (const notice of policyNotices(event.before, change)) {
        void notices.maybe(notice.kind, 'warning', notice.text, ...notice.actions).then((choice) => {
          if (choice === 'Show Log' && notice.runId) void vscode.commands.executeCommand('quantilica.showRunLog', notice.runId);
          if (choice === 'Cancel Run' && notice.runId) void vscode.commands.executeCommand('quantilica.cancelRun', notice.runId);
          if (choice === 'Run Now' && notice.fetcher) void vscode.commands.executeCommand('quantilica.runFetcher', notice.fetcher);
        });
      }
      if (change.kind === 'disk') {
        const was = event.before.disk?.state;
        const free = change.disk.freeGb === null ? 'unknown' : gbWords(change.disk.freeGb);
        if (change.disk.state === 'paused' && was !== 'paused') {
          void notices.maybe(
            'diskGate',
            'warning',
            `Quantilica: the disk gate paused new fetchers: ${free} free, below ${gbWords(change.disk.pauseGb)}. They start again at ${gbWords(change.disk.resumeGb)}.`,
          );
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
        void notices
          .maybe(
            'agentStopped',
            'warning',
            'Quantilica: the agent stopped. The extension reconnects by itself when it runs again.',
            'Start Agent',
          )
          .then((choice) => {
            if (choice === 'Start Agent') void launcher.start();
          });
      }
    }),
  ];
  return vscode.Disposable.from(...subscriptions);
}

export interface PolicyNotice {
  kind: 'late' | 'stalled';
  text: string;
  actions: string[];
  runId?: string;
  fetcher?: string;
}

/**
 * The notifications a change brings under the run policies: a run that has just stalled (its log
 * stopped growing), a scheduled fetcher that has just become late. Each once, when it starts.
 */
export function policyNotices(before: Snapshot, change: Change): PolicyNotice[] {
  const out: PolicyNotice[] = [];
  if (change.kind === 'run' && change.run.stalledSince && change.run.status === 'running') {
    const run = change.run;
    if (!before.runs.find((r) => r.runId === run.runId)?.stalledSince) {
      out.push({
        kind: 'stalled',
        text: `Quantilica: ${run.fetcher} stalled: its log has not grown since ${clockTime(run.logGrewAt ?? run.stalledSince ?? '')}.`,
        actions: ['Show Log', 'Cancel Run'],
        runId: run.runId,
        fetcher: run.fetcher,
      });
    }
  }
  if (change.kind === 'schedule') {
    const wasLate = new Set((before.schedule?.entries ?? []).filter((e) => e.lateSince).map((e) => e.fetcher));
    for (const entry of change.schedule.entries) {
      if (!entry.lateSince || wasLate.has(entry.fetcher)) continue;
      out.push({
        kind: 'late',
        text: `Quantilica: ${entry.fetcher} is late: no completed run within ${entry.lateAfterMinutes ?? '?'} min of its due time (late since ${clockTime(entry.lateSince)}).`,
        actions: ['Run Now'],
        fetcher: entry.fetcher,
      });
    }
  }
  return out;
}
