import * as vscode from 'vscode';
import { ProgressType, type LanguageClient } from 'vscode-languageclient/node';
import {
  CancelRun,
  FlushTelemetry,
  RunFetcher,
  type FlushProgress,
  type RunInfo,
} from '../shared/protocol';
import type { AgentLauncher } from './agentLauncher';
import { AgentDownError, type AgentSession } from './agentSession';
import { describeResult } from './describe';
import { diskMarkdown, SHOW_DETAILS_COMMAND } from './diskStatusItem';
import type { TreeNode } from './poolTreeProvider';
import { reportError } from './reportError';
import { runLogUri } from './runLogDocuments';

const flushProgress = new ProgressType<FlushProgress>();

/** A run named by a tree item (slot or waiting run) or by its id. */
type RunTarget = string | TreeNode | undefined;

/**
 * Every command is registered at activation, whatever the agent's state; one that needs the agent
 * explains that it is down and offers to start it, instead of "command not found".
 */
export function registerCommands(session: AgentSession, launcher: AgentLauncher, log: vscode.LogOutputChannel): vscode.Disposable[] {
  let flushSeq = 0;

  const connected = (): LanguageClient | undefined => {
    try {
      return session.client();
    } catch (err) {
      if (!(err instanceof AgentDownError)) throw err;
      log.info(`command needs the agent: ${err.message}`);
      void vscode.window.showWarningMessage(`Quantilica: the agent is not running (${err.reason}).`, 'Start agent', 'Open Output').then((choice) => {
        if (choice === 'Start agent') void launcher.start();
        if (choice === 'Open Output') log.show(true);
      });
      return undefined;
    }
  };

  const failed = (short: string) => (err: unknown): undefined => {
    reportError(log, short, err);
    return undefined;
  };

  const runIdOf = async (target: RunTarget, placeHolder: string): Promise<string | undefined> => {
    if (typeof target === 'string') return target;
    if (target?.kind === 'waitingRun') return target.runId;
    if (target?.kind === 'slot') {
      const slot = session.snapshot?.pools.find((p) => p.name === target.pool)?.slots.find((s) => s.index === target.index);
      return slot?.holder?.runId ?? undefined;
    }
    const runs = (session.snapshot?.runs ?? []).filter((r) => placeHolder.startsWith('Cancel') ? r.status === 'waiting' || r.status === 'running' : true);
    const pick = await vscode.window.showQuickPick(
      runs.map((r) => ({ label: r.fetcher, description: `${r.status} · ${r.pool}`, detail: r.runId, runId: r.runId })),
      { placeHolder, matchOnDetail: true },
    );
    return pick?.runId;
  };

  return [
    vscode.commands.registerCommand('quantilica.runFetcher', async (fetcher?: string): Promise<RunInfo | undefined> => {
      const client = connected();
      if (!client) return undefined;
      const name = fetcher ?? (await pickFetcher(session));
      if (!name) return undefined;
      try {
        const { run } = await client.sendRequest<RunFetcher.Result>(RunFetcher.method, { fetcher: name, trigger: 'protocol' } satisfies RunFetcher.Params);
        vscode.window.setStatusBarMessage(`Quantilica: ${run.fetcher} queued in ${run.pool} (run ${run.runId})`, 5000);
        return run;
      } catch (err) {
        return failed(`Quantilica: could not run ${name}.`)(err);
      }
    }),

    vscode.commands.registerCommand('quantilica.cancelRun', async (target?: RunTarget): Promise<RunInfo[] | undefined> => {
      const client = connected();
      if (!client) return undefined;
      const runId = await runIdOf(target, 'Cancel which run?');
      if (!runId) return undefined;
      try {
        const { cancelled } = await client.sendRequest<CancelRun.Result>(CancelRun.method, { runId } satisfies CancelRun.Params);
        vscode.window.setStatusBarMessage(`Quantilica: cancelled run ${runId}`, 5000);
        return cancelled;
      } catch (err) {
        return failed(`Quantilica: could not cancel run ${runId}.`)(err);
      }
    }),

    // Resolves with the agent's result and the progress it reported, which is also what the
    // notification showed.
    vscode.commands.registerCommand('quantilica.flushTelemetry', async (): Promise<(FlushTelemetry.Result & { progress: FlushProgress[] }) | undefined> => {
      const client = connected();
      if (!client) return undefined;
      const workDoneToken = `flush-${++flushSeq}`;
      return vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title: 'Quantilica: flushing telemetry' }, async (progress) => {
        let reported = 0;
        const seen: FlushProgress[] = [];
        const subscription = client.onProgress(flushProgress, workDoneToken, (value) => {
          seen.push(value);
          const percentage = value.percentage ?? reported;
          progress.report({ message: `${value.sent} sent, ${value.remaining} remaining`, increment: Math.max(0, percentage - reported) });
          reported = Math.max(reported, percentage);
          log.debug(`flush progress: ${value.kind} ${value.message}`);
        });
        try {
          const result = await client.sendRequest<FlushTelemetry.Result>(FlushTelemetry.method, { workDoneToken } satisfies FlushTelemetry.Params);
          if (result.error) reportError(log, `Quantilica: flush stopped after ${result.sent} events.`, result.error);
          else void vscode.window.showInformationMessage(`Quantilica: telemetry flushed: ${result.sent} sent, ${result.remaining} remaining.`);
          return { ...result, progress: seen };
        } catch (err) {
          return failed('Quantilica: flush failed.')(err);
        } finally {
          subscription.dispose();
        }
      });
    }),

    vscode.commands.registerCommand('quantilica.showRunLog', async (target?: RunTarget): Promise<vscode.TextEditor | undefined> => {
      if (!connected()) return undefined;
      const runId = await runIdOf(target, 'Show the log of which run?');
      if (!runId) return undefined;
      try {
        const doc = await vscode.workspace.openTextDocument(runLogUri(runId));
        return await vscode.window.showTextDocument(doc, { preview: true });
      } catch (err) {
        return failed(`Quantilica: no log for run ${runId}.`)(err);
      }
    }),

    vscode.commands.registerCommand('quantilica.startAgent', () => launcher.start()),
    vscode.commands.registerCommand('quantilica.restartAgent', () => launcher.restart()),
    vscode.commands.registerCommand('quantilica.showOutput', () => log.show()),

    vscode.commands.registerCommand(SHOW_DETAILS_COMMAND, async () => {
      const snapshot = session.snapshot;
      if (!connected() || !snapshot) return undefined;
      const content = snapshot.disk ? diskMarkdown(snapshot.disk, snapshot.spool) : '**Disk gate**: the agent reports no disk status.';
      const doc = await vscode.workspace.openTextDocument({ language: 'markdown', content });
      return vscode.window.showTextDocument(doc, { preview: true });
    }),
  ];
}

async function pickFetcher(session: AgentSession): Promise<string | undefined> {
  const snapshot = session.snapshot;
  if (!snapshot) return undefined;
  const last = new Map<string, RunInfo>();
  for (const run of snapshot.runs) {
    if (run.finishedAt && !last.has(run.fetcher)) last.set(run.fetcher, run);
  }
  const pick = await vscode.window.showQuickPick(
    snapshot.catalog.map((entry) => {
      const previous = last.get(entry.name);
      return {
        label: entry.name,
        description: entry.pool,
        detail: previous ? `last: ${describeResult(previous)}` : 'no recent run',
        name: entry.name,
      };
    }),
    { placeHolder: 'Run which fetcher?', matchOnDescription: true },
  );
  return pick?.name;
}
