// The .vsix as a user gets it: installed into code-server with --install-extension (runOffline.mjs),
// activated, and able to start the agent it ships (with its native modules) and run a fetcher.
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
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
    await waitFor(
      () => {
        try {
          process.kill(pid, 0);
          return false;
        } catch {
          return true;
        }
      },
      { what: `agent ${pid} to stop`, timeoutMs: 30_000, intervalMs: 50 },
    );
  });

  it('is installed from the .vsix and activates', async () => {
    const extension = vscode.extensions.getExtension<QuantilicaApi>(EXTENSION_ID);
    assert.ok(extension, `${EXTENSION_ID} is installed`);
    const extensionsDir = process.env.QUANTILICA_TEST_EXTENSIONS_DIR ?? '';
    assert.ok(
      extensionsDir !== '' && extension.extensionPath.startsWith(path.resolve(extensionsDir)),
      `loaded from the installed copy, not the repository: ${extension.extensionPath}`,
    );
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
    await waitFor(() => api.session.snapshot?.runs.find((r) => r.runId === run.runId)?.status === 'running', {
      what: `run ${run.runId} to start`,
      timeoutMs: 15_000,
    });
    await vscode.commands.executeCommand('quantilica.cancelRun', run.runId);
    await waitFor(() => api.session.snapshot?.runs.find((r) => r.runId === run.runId)?.status === 'cancelled', {
      what: `run ${run.runId} to be cancelled`,
      timeoutMs: 15_000,
    });
  });
});

describe('the .vsix Details page', () => {
  it('shows the user README, with no image that could be broken', () => {
    const extension = vscode.extensions.getExtension(EXTENSION_ID)!;
    // vsce stores it as readme.md; the Details page reads it from there.
    const name = fs.readdirSync(extension.extensionPath).find((f) => f.toLowerCase() === 'readme.md');
    assert.ok(name, 'the package has a README');
    const readme = fs.readFileSync(path.join(extension.extensionPath, name), 'utf8');
    assert.match(readme, /^# Quantilica Orchestrator/);
    assert.match(readme, /\*\*Runs\*\*/, 'the user README, which describes the views');
    assert.doesNotMatch(readme, /npm (ci|test)/, 'not the developer README');
    const images = [...readme.matchAll(/!\[[^\]]*\]\(([^)\s]+)/g), ...readme.matchAll(/<img[^>]*src="([^"]+)"/g)].map((m) => m[1] ?? '');
    for (const src of images) {
      assert.ok(/^https:/.test(src) || fs.existsSync(path.join(extension.extensionPath, src)), `image ${src} resolves inside the package`);
    }
  });
});
