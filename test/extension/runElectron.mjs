// The extension-host suite with @vscode/test-electron, for machines that can download VS Code (the
// ecosystem's standard runner). Offline machines use runOffline.mjs; both run the same mocha suite
// against the same kind of station. `node test/extension/runElectron.mjs`
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as os from 'node:os';
import * as path from 'node:path';
import { runTests } from '@vscode/test-electron';
import { stationEnv } from './stationEnv.mjs';

const root = path.resolve(import.meta.dirname, '..', '..');
const require = createRequire(import.meta.url);

function step(what, command, args) {
  const result = spawnSync(command, args, { cwd: root, stdio: 'inherit' });
  if (result.status !== 0) throw new Error(`${what} failed`);
}

async function main() {
  step('bundling', process.execPath, ['esbuild.mjs']);
  step('compiling the suite', process.execPath, [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-b', 'test/extension']);
  const { startTestPostgres } = require(path.join(root, 'out', 'test', 'support', 'postgres.js'));
  const postgres = await startTestPostgres();
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'quantilica-electron-'));
  const { home, env } = stationEnv(tmp, postgres.url);
  const workspace = path.join(tmp, 'workspace');
  fs.mkdirSync(workspace, { recursive: true });
  try {
    return await runTests({
      extensionDevelopmentPath: root,
      extensionTestsPath: path.join(root, 'out', 'test', 'extension', 'suite', 'index.js'),
      launchArgs: [workspace, '--disable-extensions', '--disable-workspace-trust', '--user-data-dir', path.join(tmp, 'user-data')],
      extensionTestsEnv: env,
    }).then(
      () => 0,
      () => 1,
    );
  } finally {
    try {
      const { pid } = JSON.parse(fs.readFileSync(path.join(home, '.quantilica', 'agent.json'), 'utf8'));
      process.kill(pid, 'SIGTERM');
    } catch {
      /* no agent left */
    }
    await postgres.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

main().then(
  (status) => process.exit(status),
  (err) => {
    process.stderr.write(`${err.stack ?? err.message}\n`);
    process.exit(1);
  },
);
