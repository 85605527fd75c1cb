// The .vsix as a user gets it: installed into code-server with --install-extension (runOffline.mjs),
// activated, and able to start the agent it ships (with its native modules) and run a fetcher.
import * as assert from 'node:assert/strict';
import * as path from 'node:path';
import * as vscode from 'vscode';
import type { QuantilicaApi } from '../../../extension/extension';
import { waitFor } from '../../support/waitFor';

const EXTENSION_ID = 'quantilica.quantilica-orchestrator';

describe('the installed .vsix', () => {
  let api: QuantilicaApi;
  let pid = 0;

  after(async () => {
    if (pid <= 0) return;
    process.kill(pid, 'SIGTERM');
    await waitFor(() => {
      try {
        process.kill(pid, 0);
        return false;
      } catch {
        return true;
      }
    }, { what: `agent ${pid} to stop`, timeoutMs: 30_000, intervalMs: 50 });
  });

  it('is installed from the .vsix and activates', async () => {
    const extension = vscode.extensions.getExtension<QuantilicaApi>(EXTENSION_ID);
    assert.ok(extension, `${EXTENSION_ID} is installed`);
    const extensionsDir = process.env.QUANTILICA_TEST_EXTENSIONS_DIR ?? '';
    assert.ok(extensionsDir !== '' && extension.extensionPath.startsWith(path.resolve(extensionsDir)), `loaded from the installed copy, not the repository: ${extension.extensionPath}`);
    api = await extension.activate();
    assert.ok(api, 'activate returned the API');
    assert.ok(extension.isActive);
    assert.ok(api.activationMs >= 0);
  });

  it('starts the agent it ships and runs a fetcher with it', async () => {
    const started = await vscode.commands.executeCommand<number | undefined>('quantilica.startAgent');
    assert.ok(started && started > 0, 'the bundled agent started (its native modules load)');
    pid = started;
    await waitFor(() => api.tree.getChildren().length === 3, { what: 'the three pools in the tree' });
    const run = await vscode.commands.executeCommand<{ runId: string; pool: string } | undefined>('quantilica.runFetcher', 'rtn');
    assert.ok(run);
    await waitFor(() => api.session.snapshot?.runs.find((r) => r.runId === run.runId)?.status === 'running', { what: `run ${run.runId} to start`, timeoutMs: 15_000 });
    await vscode.commands.executeCommand('quantilica.cancelRun', run.runId);
    await waitFor(() => api.session.snapshot?.runs.find((r) => r.runId === run.runId)?.status === 'cancelled', { what: `run ${run.runId} to be cancelled`, timeoutMs: 15_000 });
  });
});
