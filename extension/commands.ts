import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import { CancelRun, FlushTelemetry, isFinalStatus, RunFetcher, type FlushProgress, type RunInfo } from '../shared/protocol';
import type { AgentLauncher } from './agentLauncher';
import { AgentDownError, type AgentSession } from './agentSession';
import { describeWait } from './describe';
import { outcome } from './runPresentation';
import { showDiskDetails, SHOW_DETAILS_COMMAND_ID } from './diskDetailsDocument';
import { activeRunOf, fetcherPickItems } from './fetcherPick';
import type { Notices } from './notices';
import type { TreeNode } from './poolTreeProvider';
import { runLogUri, type RunLogDocuments } from './runLogDocuments';
import type { RunsNode } from './runsTreeProvider';
import { sendRequest } from './protocolCalls';

/** A run named by a tree item (slot, waiting run, Runs row) or by its id. */
type RunTarget = string | TreeNode | RunsNode | undefined;

/**
 * Every command is registered at activation, whatever the agent's state; one that needs the agent
 * explains that it is down and offers to start it, instead of "command not found". (The menus hide
 * Run and Flush while no agent is connected; the palette and keybindings still reach them.)
 */
export function registerCommands(
  session: AgentSession,
  launcher: AgentLauncher,
  log: vscode.LogOutputChannel,
  notices: Notices,
  logs: RunLogDocuments,
): vscode.Disposable[] {
  let flushSeq = 0;

  const connected = (): LanguageClient | undefined => {
    try {
      return session.client();
    } catch (err) {
      if (!(err instanceof AgentDownError)) throw err;
      log.info(`command needs the agent: ${err.reason}`);
      void notices
        .show(
          'warning',
          'Quantilica: no agent is connected. The extension reconnects by itself as soon as an agent starts.',
          'Start Agent',
          'Show Output',
        )
        .then((choice) => {
          if (choice === 'Start Agent') void launcher.start();
          if (choice === 'Show Output') log.show(true);
        });
      return undefined;
    }
  };

  /** The short message says what went wrong and why; the whole detail is in Output. */
  const failed =
    (short: string) =>
    (err: unknown): undefined => {
      const detail = err instanceof Error ? err.message : String(err);
      log.error(`${short} ${detail}`);
      void notices.show('error', `${short} ${firstLine(detail)}`, 'Show Output').then((choice) => {
        if (choice === 'Show Output') log.show(true);
      });
      return undefined;
    };

  const findRun = (runId: string): RunInfo | undefined => session.snapshot?.runs.find((r) => r.runId === runId);

  const runIdOf = async (target: RunTarget, placeHolder: string, activeOnly: boolean): Promise<string | undefined> => {
    if (typeof target === 'string') return target;
    if (target?.kind === 'waitingRun' || target?.kind === 'run') return target.runId;
    if (target?.kind === 'slot') {
      const slot = session.snapshot?.pools.find((p) => p.name === target.pool)?.slots.find((s) => s.index === target.index);
      return slot?.holder?.runId ?? undefined;
    }
    const known = new Map((runsHistory?.() ?? []).map((r) => [r.runId, r]));
    for (const r of session.snapshot?.runs ?? []) known.set(r.runId, r);
    const runs = [...known.values()]
      .filter((r) => !activeOnly || !isFinalStatus(r.status))
      .sort((a, b) => (b.startedAt ?? b.enqueuedAt).localeCompare(a.startedAt ?? a.enqueuedAt));
    const pick = await notices.pick(
      placeHolder,
      runs.map((r) => ({ label: r.fetcher, description: `${outcome(r)} · ${r.pool}`, detail: r.runId, runId: r.runId })),
    );
    return pick?.runId;
  };

  const runFetcher = async (name: string, client: LanguageClient): Promise<RunInfo | undefined> => {
    const active = activeRunOf(session.snapshot, name);
    if (active && !(await confirmSecondRun(active, notices))) return undefined;
    try {
      const { run } = await sendRequest(client, RunFetcher.type, { fetcher: name, trigger: 'protocol' });
      vscode.window.setStatusBarMessage(`Quantilica: ${run.fetcher} queued in ${run.pool}`, 5000);
      return run;
    } catch (err) {
      return failed(`Quantilica: could not run ${name}:`)(err);
    }
  };

  const openLog = async (runId: string, follow = false): Promise<vscode.TextEditor | undefined> => {
    const run = findRun(runId);
    // A waiting run has no log yet, unless it already worked (a sync hibernating between legs).
    if (run?.status === 'waiting' && run.logPath === null) {
      void notices.show('info', `Quantilica: ${run.fetcher} has not started yet (${describeWait(run.wait, run)}), so it has no log yet.`);
      return undefined;
    }
    try {
      const doc = await vscode.workspace.openTextDocument(runLogUri(runId, run?.fetcher ?? 'run'));
      const editor = await vscode.window.showTextDocument(doc, { preview: true });
      // Following starts at the end, so the view keeps up with the tail from then on.
      if (follow) logs.followTail(editor);
      return editor;
    } catch (err) {
      return failed(`Quantilica: no log for ${run?.fetcher ?? `run ${runId}`}:`)(err);
    }
  };

  return [
    vscode.commands.registerCommand('quantilica.runFetcher', async (fetcher?: string): Promise<RunInfo | undefined> => {
      const client = connected();
      if (!client) return undefined;
      const name = fetcher ?? (await pickFetcher(session));
      if (!name) return undefined;
      return runFetcher(name, client);
    }),

    vscode.commands.registerCommand('quantilica.runAgain', async (target?: RunTarget): Promise<RunInfo | undefined> => {
      const client = connected();
      if (!client) return undefined;
      const runId = await runIdOf(target, 'Run which fetcher again?', false);
      const fetcher = runId ? (findRun(runId)?.fetcher ?? runsLookup?.(runId)?.fetcher) : undefined;
      return fetcher ? runFetcher(fetcher, client) : undefined;
    }),

    vscode.commands.registerCommand('quantilica.cancelRun', async (target?: RunTarget): Promise<RunInfo[] | undefined> => {
      const client = connected();
      if (!client) return undefined;
      const runId = await runIdOf(target, 'Cancel which run?', true);
      if (!runId) return undefined;
      try {
        const { cancelled } = await sendRequest(client, CancelRun.type, { runId });
        vscode.window.setStatusBarMessage(`Quantilica: cancelled ${findRun(runId)?.fetcher ?? runId}`, 5000);
        return cancelled;
      } catch (err) {
        return failed(`Quantilica: could not cancel ${findRun(runId)?.fetcher ?? `run ${runId}`}:`)(err);
      }
    }),

    // Resolves with the agent's result and the progress it reported, which is also what the
    // notification showed.
    vscode.commands.registerCommand(
      'quantilica.flushTelemetry',
      async (): Promise<(FlushTelemetry.Result & { progress: FlushProgress[] }) | undefined> => {
        const client = connected();
        if (!client) return undefined;
        if (session.snapshot?.spool?.database === 'not-configured') {
          void notices.show(
            'warning',
            'Quantilica: telemetry cannot be flushed: the agent has no database (QUANTILICA_DATABASE_URL is not set), so events stay in its spool.',
          );
          return undefined;
        }
        const workDoneToken = `flush-${++flushSeq}`;
        return vscode.window.withProgress(
          { location: vscode.ProgressLocation.Notification, title: 'Quantilica: flushing telemetry' },
          async (progress) => {
            let reported = 0;
            const seen: FlushProgress[] = [];
            const subscription = client.onProgress(FlushTelemetry.progress, workDoneToken, (value) => {
              seen.push(value);
              const percentage = value.percentage ?? reported;
              progress.report({
                message: `${value.sent} sent, ${value.remaining} remaining`,
                increment: Math.max(0, percentage - reported),
              });
              reported = Math.max(reported, percentage);
              log.debug(`flush progress: ${value.kind} ${value.message}`);
            });
            try {
              const result = await sendRequest(client, FlushTelemetry.type, { workDoneToken });
              if (result.error) {
                log.warn(`flush stopped after ${result.sent} events: ${result.error}`);
                void notices
                  .show('warning', `Quantilica: flush stopped after ${result.sent} events: ${result.error}.`, 'Show Output')
                  .then((c) => {
                    if (c === 'Show Output') log.show(true);
                  });
              } else {
                void notices.show('info', `Quantilica: telemetry flushed: ${result.sent} sent, ${result.remaining} remaining.`);
              }
              return { ...result, progress: seen };
            } catch (err) {
              return failed('Quantilica: flush failed:')(err);
            } finally {
              subscription.dispose();
            }
          },
        );
      },
    ),

    vscode.commands.registerCommand('quantilica.showRunLog', async (target?: RunTarget): Promise<vscode.TextEditor | undefined> => {
      if (!connected()) return undefined;
      const runId = await runIdOf(target, 'Show the log of which run?', false);
      return runId ? openLog(runId) : undefined;
    }),

    vscode.commands.registerCommand('quantilica.followRunLog', async (target?: RunTarget): Promise<vscode.TextEditor | undefined> => {
      if (!connected()) return undefined;
      const runId = await runIdOf(target, 'Follow the log of which run?', true);
      return runId ? openLog(runId, true) : undefined;
    }),

    // The run id is what `quantilica logs`, `quantilica runs` and the telemetry tables are searched by.
    vscode.commands.registerCommand('quantilica.copyRunId', async (target?: RunTarget): Promise<string | undefined> => {
      const runId = await runIdOf(target, 'Copy the id of which run?', false);
      if (!runId) return undefined;
      await vscode.env.clipboard.writeText(runId);
      vscode.window.setStatusBarMessage(`Quantilica: copied run id ${runId}`, 5000);
      return runId;
    }),

    vscode.commands.registerCommand('quantilica.startAgent', () => launcher.start()),
    vscode.commands.registerCommand('quantilica.restartAgent', () => launcher.restart()),
    vscode.commands.registerCommand('quantilica.showOutput', () => log.show()),
    vscode.commands.registerCommand(SHOW_DETAILS_COMMAND_ID, () => showDiskDetails()),
  ];
}

/** Set by the extension: finds a run in the Runs view's history (older than the snapshot's). */
let runsLookup: ((runId: string) => RunInfo | undefined) | undefined;
let runsHistory: (() => RunInfo[]) | undefined;
export function setRunsLookup(lookup: (runId: string) => RunInfo | undefined, history?: () => RunInfo[]): void {
  runsLookup = lookup;
  runsHistory = history;
}

function firstLine(text: string): string {
  const line = text.split('\n')[0] ?? text;
  return /[.!?:]$/.test(line) ? line : `${line}.`;
}

async function pickFetcher(session: AgentSession): Promise<string | undefined> {
  const snapshot = session.snapshot;
  if (!snapshot) return undefined;
  const pick = await vscode.window.showQuickPick(fetcherPickItems(snapshot), {
    placeHolder: 'Run which fetcher?',
    matchOnDescription: true,
    matchOnDetail: true,
  });
  return pick?.name;
}

/** A second run of a running fetcher only on the user's word (a non-modal pick, Escape says no). */
async function confirmSecondRun(active: RunInfo, notices: Notices): Promise<boolean> {
  const title = `${active.fetcher} is ${active.status} now. Start a second run?`;
  notices.asked.push(title);
  const yes = { label: 'Start a Second Run', description: `beside run ${active.runId}` };
  const no = { label: 'Cancel', description: 'keep only the current run' };
  const choice = await vscode.window.showQuickPick([no, yes], { title, placeHolder: title });
  return choice === yes;
}
