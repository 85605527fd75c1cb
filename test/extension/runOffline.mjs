// The extension-host tier, offline: builds what it needs, installs (or finds) code-server + Node 24 +
// Chromium, starts a real PostgreSQL, runs the mocha suite in the remote extension host of
// code-server, then packages the .vsix, installs it with `--install-extension` and checks that it
// activates and runs its bundled agent. Exits non-zero on any failure or timeout.
// `npm test` calls it through test/run.mjs; alone: `node test/extension/runOffline.mjs [dev|vsix]`
// (both suites by default, one of them when named). The suite's pictures go to test-results/
// (ignored by git), so a test run never dirties the tree; `--update-screenshots` (`npm run
// screenshots`) writes the README's pictures in docs/screenshots instead.
import { execFileSync, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as os from 'node:os';
import * as path from 'node:path';
import { installExtension, runSuite, startCodeServer, writeUserSettings } from './codeServerHost.mjs';
import { stationEnv } from './stationEnv.mjs';

const root = path.resolve(import.meta.dirname, '..', '..');
const require = createRequire(import.meta.url);
const SUITE_TIMEOUT_MS = 6 * 60_000;
const started = Date.now();
const log = (line) => process.stdout.write(`[extension-host] ${line}\n`);
const args = process.argv.slice(2);
const updateScreenshots = args.includes('--update-screenshots');
const only = args.find((a) => !a.startsWith('--'));
/** Where the named pictures go: the README's folder only when asked to update it. */
const screenshotDir = updateScreenshots ? path.join(root, 'docs', 'screenshots') : path.join(root, 'test-results', 'screenshots');

function step(what, command, args) {
  const result = spawnSync(command, args, { cwd: root, stdio: 'inherit' });
  if (result.status !== 0) throw new Error(`${what} failed (${command} ${args.join(' ')})`);
}

/** The offline host: installs it on a fresh machine, finds the cached one otherwise. */
function installHost() {
  const output = execFileSync('bash', [path.join(root, 'test', 'extension', 'installHost.sh')], {
    cwd: root,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return output.trim().split('\n').at(-1);
}

function stopAgentOf(home) {
  // The agent the extension started is detached (it is the user's, not the window's): stop it here.
  try {
    const { pid } = JSON.parse(fs.readFileSync(path.join(home, '.quantilica', 'agent.json'), 'utf8'));
    process.kill(pid, 'SIGTERM');
  } catch {
    /* none left */
  }
}

/** `git status` of the tree (null outside a git checkout): a test run must leave it as it found it. */
function treeStatus() {
  const result = spawnSync('git', ['status', '--porcelain', '--untracked-files=all'], { cwd: root, encoding: 'utf8' });
  return result.status === 0 ? result.stdout : null;
}

async function main() {
  const before = treeStatus();
  step('bundling', process.execPath, ['esbuild.mjs']);
  step('compiling the suite', process.execPath, [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-b', 'test/extension']);
  const hostDir = installHost();
  log(`host: ${hostDir} (ready after ${Math.round((Date.now() - started) / 1000)} s)`);

  const { startTestPostgres } = require(path.join(root, 'out', 'test', 'support', 'postgres.js'));
  const postgres = await startTestPostgres();
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'quantilica-ext-'));
  const cleanups = [() => postgres.stop()];
  let status = 1;
  try {
    status = only === 'vsix' ? 0 : await developmentSuite(hostDir, tmp, postgres.url, cleanups);
    if (status === 0 && only !== 'dev') status = await installedVsixSuite(hostDir, tmp, postgres.url, cleanups);
  } finally {
    for (const cleanup of cleanups.reverse()) {
      try {
        await cleanup();
      } catch (err) {
        log(`cleanup: ${err.message}`);
      }
    }
    if (status === 0) fs.rmSync(tmp, { recursive: true, force: true });
    else log(`kept ${tmp} (logs of code-server and the agents)`);
  }
  const after = treeStatus();
  if (status === 0 && !updateScreenshots && before !== null && after !== before) {
    log(`the suite changed the tree (git status before:\n${before || '(clean)'}\nafter:\n${after || '(clean)'})`);
    status = 1;
  }
  log(`${status === 0 ? 'passed' : 'FAILED'} in ${Math.round((Date.now() - started) / 1000)} s`);
  return status;
}

async function developmentSuite(hostDir, tmp, databaseUrl, cleanups) {
  const dir = path.join(tmp, 'dev');
  const { home, env } = stationEnv(dir, databaseUrl);
  fs.mkdirSync(env.QUANTILICA_TEST_SCREENSHOTS, { recursive: true });
  const userDataDir = path.join(dir, 'user-data');
  const workspace = path.join(dir, 'workspace');
  fs.mkdirSync(workspace, { recursive: true });
  writeUserSettings(userDataDir);
  const server = await startCodeServer({
    hostDir,
    env,
    userDataDir,
    extensionsDir: path.join(dir, 'extensions'),
    configFile: path.join(dir, 'code-server.yaml'),
    logFile: path.join(dir, 'code-server.log'),
  });
  cleanups.push(
    () => server.stop(),
    () => stopAgentOf(home),
  );
  log(`code-server on port ${server.port}; running the suite`);
  return runSuite({
    port: server.port,
    workspace,
    developmentPath: root,
    testsPath: path.join(root, 'out', 'test', 'extension', 'suite', 'index.js'),
    timeoutMs: SUITE_TIMEOUT_MS,
    screenshots: {
      dir: env.QUANTILICA_TEST_SCREENSHOTS,
      files: Object.fromEntries(
        ['workbench', 'runs', 'run-log', 'schedule', 'station'].map((name) => [name, path.join(screenshotDir, `${name}.png`)]),
      ),
    },
    log,
  });
}

async function installedVsixSuite(hostDir, tmp, databaseUrl, cleanups) {
  step('packaging the .vsix', process.execPath, [path.join(root, 'extension', 'packageVsix.mjs')]);
  const vsix = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
  const file = path.join(root, `${vsix.name}-${vsix.version}.vsix`);
  const dir = path.join(tmp, 'vsix');
  const { home, env } = stationEnv(dir, databaseUrl);
  const userDataDir = path.join(dir, 'user-data');
  const extensionsDir = path.join(dir, 'extensions');
  const configFile = path.join(dir, 'code-server.yaml');
  writeUserSettings(userDataDir);
  fs.writeFileSync(configFile, 'auth: none\ncert: false\n');
  log(await installExtension({ hostDir, vsix: file, userDataDir, extensionsDir, configFile, env }));
  // The payload needs a development extension; an empty one, so the extension under test is the
  // installed copy from the .vsix.
  const probe = path.join(dir, 'probe-extension');
  fs.mkdirSync(probe, { recursive: true });
  fs.writeFileSync(
    path.join(probe, 'package.json'),
    JSON.stringify({ name: 'vsix-probe', publisher: 'quantilica-test', version: '0.0.0', engines: { vscode: '*' } }),
  );
  const workspace = path.join(dir, 'workspace');
  fs.mkdirSync(workspace, { recursive: true });
  const server = await startCodeServer({
    hostDir,
    env: { ...env, QUANTILICA_TEST_EXTENSIONS_DIR: extensionsDir },
    userDataDir,
    extensionsDir,
    configFile,
    logFile: path.join(dir, 'code-server.log'),
  });
  cleanups.push(
    () => server.stop(),
    () => stopAgentOf(home),
  );
  log(`installed ${path.basename(file)}; code-server on port ${server.port}; checking it activates`);
  return runSuite({
    port: server.port,
    workspace,
    developmentPath: probe,
    testsPath: path.join(root, 'out', 'test', 'extension', 'vsix', 'index.js'),
    timeoutMs: SUITE_TIMEOUT_MS,
    screenshots: null,
    log,
  });
}

main().then(
  (status) => process.exit(status),
  (err) => {
    log(`error: ${err.stack ?? err.message}`);
    process.exit(1);
  },
);
