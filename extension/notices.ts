import * as vscode from 'vscode';

export type NoticeKind = 'failedRuns' | 'diskGate' | 'agentStopped' | 'telemetry' | 'late' | 'stalled';
export type Level = 'info' | 'warning' | 'error';

/**
 * Every message the extension shows goes through here: the user's settings can silence a kind
 * (`quantilica.notifications.*`), and the last messages are kept for the extension-host tests, which
 * cannot read notifications off the screen.
 */
export class Notices {
  readonly shown: Array<{ level: Level; text: string; actions: string[] }> = [];
  /** Questions put to the user (a second run of a running fetcher). */
  readonly asked: string[] = [];
  /** Quick picks put to the user: their title and the items' labels, in order (tests answer them). */
  readonly picks: Array<{ title: string; items: string[] }> = [];
  /** Progress notifications: their title and each step reported, and whether they ended. */
  readonly progress: Array<{ title: string; steps: string[]; ended: boolean }> = [];

  show(level: Level, text: string, ...actions: string[]): Thenable<string | undefined> {
    this.shown.push({ level, text, actions });
    if (this.shown.length > 200) this.shown.shift();
    const show =
      level === 'error'
        ? vscode.window.showErrorMessage
        : level === 'warning'
          ? vscode.window.showWarningMessage
          : vscode.window.showInformationMessage;
    return show(text, ...actions);
  }

  /** A quick pick, recorded like the messages. */
  pick<T extends vscode.QuickPickItem>(title: string, items: T[]): Thenable<T | undefined> {
    this.picks.push({ title, items: items.map((i) => i.label) });
    if (this.picks.length > 50) this.picks.shift();
    return vscode.window.showQuickPick(items, { title, placeHolder: title, matchOnDescription: true, matchOnDetail: true });
  }

  /** A progress notification (the agent restarting), kept like the messages for the tests. */
  withProgress<T>(title: string, task: (report: (message: string) => void) => Thenable<T>): Thenable<T> {
    const entry = { title, steps: [] as string[], ended: false };
    this.progress.push(entry);
    if (this.progress.length > 50) this.progress.shift();
    return vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title }, async (progress) => {
      try {
        return await task((message) => {
          entry.steps.push(message);
          progress.report({ message });
        });
      } finally {
        entry.ended = true;
      }
    });
  }

  /** A notification of a kind the user can switch off. */
  maybe(kind: NoticeKind, level: Level, text: string, ...actions: string[]): Thenable<string | undefined> {
    if (!vscode.workspace.getConfiguration('quantilica.notifications').get<boolean>(kind, true)) return Promise.resolve(undefined);
    return this.show(level, text, ...actions);
  }
}
