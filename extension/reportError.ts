import * as vscode from 'vscode';

/**
 * Errors in two layers: the whole detail goes to the output channel, the user gets one short line
 * with "Open Output" (vscode-eslint's pattern).
 */
export function reportError(log: vscode.LogOutputChannel, short: string, err: unknown): void {
  const detail = err instanceof Error ? err.message : String(err);
  log.error(`${short} ${detail}`);
  void vscode.window.showErrorMessage(short, 'Open Output').then((choice) => {
    if (choice === 'Open Output') log.show(true);
  });
}
