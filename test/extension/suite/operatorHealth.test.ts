// In a real extension host: the views have their data providers the
// moment the extension activates (no "There is no data provider registered"), "Restart Agent" shows
// its progress, the disk gate's pause and resume notify (switchable), the telemetry warning item
// appears when events wait longer than the setting, a failed run notifies with a working "Show Log",
// and the Runs view shows a run's peak memory. Real agents, a real tmpfs, the real workbench page.
import * as assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as vscode from 'vscode';
import { connectAgent } from '../../../agent/client/agentClient';
import { gbWords } from '../../../shared/humanWords';
import type { RunInfo } from '../../../shared/protocol';
import type { QuantilicaApi } from '../../../extension/extension';
import { waitFor } from '../../support/waitFor';
import { AgentProcesses } from './agentProcesses';
import { queryPage } from './screenshot';

const EXTENSION_ID = 'quantilica.quantilica-orchestrator';
const home = process.env.HOME ?? '';
const connectionFile = path.join(home, '.quantilica', 'agent.json');
const repo = path.resolve(__dirname, '..', '..', '..', '..');
const agents = new AgentProcesses(
  path.join(repo, 'dist', 'agent.js'),
  process.env.QUANTILICA_TEST_NODE ?? 'node',
  path.join(home, 'agent-logs'),
);

let api: QuantilicaApi;
let agentPid = 0;

/** failer exits 3; hog holds some 60 MB for 3 s, so the memory sampler sees it. */
function writeCatalog(): string {
  const dir = path.join(home, 'health-catalog');
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'catalog.json');
  const bash = (script: string) => ['/bin/bash', '-c', script];
  fs.writeFileSync(
    file,
    JSON.stringify(
      {
        fetchers: [
          { name: 'failer', pool: 'cpu-analysis', argv: bash('echo "boom: the source answered 503"; exit 3') },
          {
            name: 'hog',
            pool: 'heavy-io',
            argv: bash('x=$(head -c 30000000 /dev/zero | tr "\\0" a); echo "holding ${#x} bytes"; sleep 3; echo done'),
          },
        ],
      },
      null,
      2,
    ),
  );
  return file;
}
const catalog = writeCatalog();

async function startAgent(env: Record<string, string> = {}): Promise<void> {
  agentPid = (await agents.start({ QUANTILICA_CATALOG: catalog, CRON_DISK_POLL_SECONDS: '0.2', ...env })).pid ?? 0;
  await waitFor(() => api.session.state.kind === 'connected' && api.session.state.info.pid === agentPid, {
    what: 'the extension to connect to the new agent',
    timeoutMs: 20_000,
  });
}

/** Stops our agent and whichever the session is connected to (one the extension started). */
async function stopAgent(): Promise<void> {
  await agents.stop(agentPid);
  if (api.session.state.kind === 'connected') await agents.stop(api.session.state.info.pid);
  await waitFor(() => api.session.state.kind === 'down', { what: 'the session to see the agent go', timeoutMs: 15_000 });
}

async function runToEnd(fetcher: string): Promise<RunInfo> {
  const queued = await vscode.commands.executeCommand<RunInfo | undefined>('quantilica.runFetcher', fetcher);
  assert.ok(queued, `${fetcher} was queued`);
  return waitFor(
    async () => {
      const client = await connectAgent(connectionFile, { client: 'health-suite' });
      try {
        const run = (await client.listRuns(50)).find((r) => r.runId === queued.runId);
        return run && run.status !== 'running' && run.status !== 'waiting' ? run : undefined;
      } finally {
        await client.close();
      }
    },
    { what: `${fetcher} to end`, timeoutMs: 30_000, intervalMs: 200 },
  );
}

async function setting(section: string, key: string, value: unknown): Promise<void> {
  await vscode.workspace.getConfiguration(section).update(key, value, vscode.ConfigurationTarget.Global);
  await waitFor(
    () =>
      vscode.workspace.getConfiguration(section).get(key) ===
      (value ?? vscode.workspace.getConfiguration(section).inspect(key)?.defaultValue),
    { what: `${section}.${key} to read back`, timeoutMs: 10_000 },
  );
}

/** A when-clause of `key == value` / `key != value` terms joined by `&&`, with no context key set. */
function holdsWithNoContext(when: string | undefined): boolean {
  return (when ?? '').split('&&').every((term) => {
    // A bare key is false with no context set; its negation true.
    const bare = /^\s*(!?)[\w.]+\s*$/.exec(term);
    if (bare) return bare[1] === '!';
    const m = /^\s*[\w.]+\s*(==|!=)\s*\S+\s*$/.exec(term);
    assert.ok(m, `a clause this check understands: ${term}`);
    return m[1] === '!=';
  });
}

async function pageText(selector: string): Promise<string> {
  return ((await queryPage(selector)) ?? []).join('\n');
}

describe('The operator’s health and notifications', () => {
  before(async () => {
    const extension = vscode.extensions.getExtension<QuantilicaApi>(EXTENSION_ID);
    assert.ok(extension);
    api = await extension.activate();
    await waitFor(() => api.session.state.kind === 'down', { what: 'no agent from an earlier suite', timeoutMs: 30_000 });
  });

  after(async () => {
    await agents.stopAll();
    if (agentPid > 0) await agents.stop(agentPid);
  });

  it('every view has its data provider from activation, before the agent answers, and the page never says "no data provider"', async () => {
    const steps = api.activationSteps;
    assert.ok(
      steps.includes('views') && steps.indexOf('views') < steps.indexOf('connect'),
      `views created before connecting (steps: ${steps.join(', ')})`,
    );
    const pkg = vscode.extensions.getExtension(EXTENSION_ID)!.packageJSON as {
      activationEvents: string[];
      contributes: { views: Record<string, Array<{ id: string }>>; viewsWelcome: Array<{ view: string; contents: string; when?: string }> };
    };
    for (const { id } of Object.values(pkg.contributes.views).flat()) {
      assert.ok(pkg.activationEvents.includes(`onView:${id}`), `a window restoring ${id} activates the extension at once`);
      // Before the extension host has activated us (a reload), no context key is set and no provider
      // is registered: VS Code shows a view's welcome content then, and "There is no data provider
      // registered" only in a view that has none for that moment.
      const early = pkg.contributes.viewsWelcome.filter((w) => w.view === id && holdsWithNoContext(w.when));
      assert.deepEqual(
        early.map((w) => w.contents),
        ['Connecting to the Quantilica agent…'],
        `${id} says "Connecting…" before activation`,
      );
    }
    for (const [name, view] of Object.entries(api.views)) {
      assert.ok(view, `the ${name} view exists`);
      // Down: no message, so the welcome view (with Start Agent) shows; "Connecting…" only before the first answer.
      assert.equal(view.message, undefined, `${name}: the welcome view shows while the agent is down`);
    }
    await vscode.commands.executeCommand('workbench.view.extension.quantilica');
    // An earlier suite may have left a view collapsed or scrolled away: each view's focus command opens it.
    for (const id of ['quantilica.pools', 'quantilica.runs']) await vscode.commands.executeCommand(`${id}.focus`);
    let seen = '';
    const sidebar = await waitFor(
      async () => {
        seen = await pageText('.part.sidebar');
        // Runs keeps the runs it listed when the agent goes (an earlier suite's), so its welcome shows only
        // in a fresh window: Pools and Schedule say the agent is down either way.
        const runs = /run history shows once one answers/.test(seen) || /\nRuns\n(Today|Yesterday)/.test(seen);
        return /No Quantilica agent answers/.test(seen) && /the schedule shows once one answers/.test(seen) && runs ? seen : undefined;
      },
      { what: 'the Pools, Runs and Schedule views in the side bar', timeoutMs: 20_000, intervalMs: 200 },
    ).catch((err: Error) => {
      throw new Error(`${err.message}; the side bar read:\n${seen}`);
    });
    assert.doesNotMatch(sidebar, /no data provider registered/i);
  });

  it('"Restart Agent" shows its progress in a notification and ends connected to the new agent', async () => {
    await startAgent();
    const before = agentPid;
    const stoppedNotices = api.notices.shown.filter((n) => /the agent stopped/.test(n.text)).length;
    await vscode.commands.executeCommand('notifications.clearAll');
    try {
      // The page is watched first: the notification shows only while the restart lasts. The test
      // workbench shows no toasts (code-server's test mode), so it is read in the notification centre.
      await vscode.commands.executeCommand('notifications.showList');
      const seen = queryPage('.notifications-center', { waitText: 'Restarting the Quantilica agent', timeoutMs: 30_000 });
      seen.catch(() => undefined); // awaited below; an early failure must not leave it unhandled
      const pid = await vscode.commands.executeCommand<number | undefined>('quantilica.restartAgent');
      if (pid !== undefined) agentPid = pid;
      assert.ok(pid !== undefined && pid !== before, `a new agent (was ${before}, now ${pid})`);
      const toast = await seen;
      if (toast !== null) assert.match(toast.join('\n'), /Restarting the Quantilica agent/, 'the progress notification showed on the page');
      assert.equal(api.session.state.kind === 'connected' ? api.session.state.info.pid : null, pid);
      const progress = api.notices.progress.filter((p) => p.title === 'Restarting the Quantilica agent').at(-1);
      assert.ok(progress?.ended, 'the progress ended');
      assert.match(progress.steps[0] ?? '', new RegExp(`stopping pid ${before}`));
      assert.match(progress.steps.at(-1) ?? '', new RegExp(`connected to the new agent \\(pid ${pid}\\)`));
      assert.equal(
        api.notices.shown.filter((n) => /the agent stopped/.test(n.text)).length,
        stoppedNotices,
        'a restart on purpose is not "the agent stopped"',
      );
    } finally {
      await vscode.commands.executeCommand('notifications.hideList');
      await stopAgent();
    }
  });

  it('the disk gate notifies when it pauses and when it resumes, and not when switched off', async () => {
    const dir = path.join(home, 'gate-data');
    fs.mkdirSync(dir, { recursive: true });
    // A real 64 MB filesystem as DATA_DIR (the suite runs as root, as CI does); thresholds in its range.
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64m,mode=0700', 'tmpfs', dir]);
    const filler = path.join(dir, 'filler');
    try {
      await startAgent({ DATA_DIR: dir, CRON_DISK_PAUSE_GB: '0.03', CRON_DISK_WARN_GB: '0.04', CRON_DISK_RESUME_GB: '0.05' });
      await waitFor(() => api.session.snapshot?.disk?.state === 'ok', { what: 'the gate open on the empty filesystem', timeoutMs: 15_000 });
      const gateNotices = () => api.notices.shown.filter((n) => /disk gate/.test(n.text));
      for (const enabled of [true, false]) {
        await setting('quantilica.notifications', 'diskGate', enabled ? undefined : false);
        const from = gateNotices().length;
        fs.writeFileSync(filler, Buffer.alloc(45 * 1024 * 1024, 1));
        await waitFor(() => api.session.snapshot?.disk?.state === 'paused', { what: 'the gate to pause', timeoutMs: 15_000 });
        if (enabled) {
          const paused = await waitFor(
            () =>
              gateNotices()
                .slice(from)
                .find((n) => /paused new fetchers/.test(n.text)),
            { what: 'the pause notification', timeoutMs: 5000 },
          );
          assert.equal(paused.level, 'warning');
          assert.match(paused.text, /below 0\.03 GB/);
        }
        fs.rmSync(filler);
        await waitFor(() => api.session.snapshot?.disk?.state === 'ok', { what: 'the gate to resume', timeoutMs: 15_000 });
        if (enabled) {
          const resumed = await waitFor(
            () =>
              gateNotices()
                .slice(from)
                .find((n) => /resumed/.test(n.text)),
            { what: 'the resume notification', timeoutMs: 5000 },
          );
          assert.equal(resumed.level, 'info');
        } else {
          // The gauge and the notifier hear the same change event: the gauge shows it, so the notifier decided.
          assert.deepEqual(
            gateNotices()
              .slice(from)
              .map((n) => n.text),
            [],
            'switched off: no notification',
          );
        }
      }
    } finally {
      await setting('quantilica.notifications', 'diskGate', undefined);
      if (api.session.state.kind === 'connected') await stopAgent();
      execFileSync('umount', [dir]);
    }
  });

  it('the telemetry warning item appears when events have waited longer than the setting, saying why', async () => {
    // PostgreSQL that never answers: the events wait in the spool.
    await startAgent({ QUANTILICA_DATABASE_URL: 'postgres://quantilica@127.0.0.1:9/none' });
    agents.emitEvent('stale-test-a');
    agents.emitEvent('stale-test-b');
    await waitFor(() => (api.session.snapshot?.spool?.pending ?? 0) >= 2 && (api.telemetry.oldestAgeSeconds ?? 0) > 4, {
      what: 'two events waiting for more than 4 s',
      timeoutMs: 30_000,
      intervalMs: 200,
    });
    assert.equal(api.telemetry.visible, false, 'not shown under the default 15 minutes');
    try {
      await setting('quantilica.telemetry', 'staleMinutes', 0.05);
      await waitFor(() => api.telemetry.visible, { what: 'the warning item with a 3 s setting', timeoutMs: 10_000 });
      const item = api.telemetry.view;
      assert.match(item.text, /telemetry .* behind/);
      assert.match(item.tooltip, /\d+ telemetry events have not reached PostgreSQL/);
      assert.match(item.tooltip, /PostgreSQL is unreachable|ECONNREFUSED|connect/);
      const bar = await waitFor(
        async () => {
          const t = await pageText('.part.statusbar');
          return /telemetry .* behind/.test(t) ? t : undefined;
        },
        { what: 'the item in the status bar on the page', timeoutMs: 15_000, intervalMs: 200 },
      );
      assert.match(bar, /telemetry/);
      await setting('quantilica.telemetry', 'staleMinutes', undefined);
      await waitFor(() => !api.telemetry.visible, { what: 'the item to go with the default setting back', timeoutMs: 10_000 });
    } finally {
      await setting('quantilica.telemetry', 'staleMinutes', undefined);
      await stopAgent();
    }
  });

  it('a failed run notifies with "Show Log", which opens its log; switched off, it does not; the Runs view shows a run’s peak memory', async () => {
    await startAgent();
    await vscode.commands.executeCommand('notifications.clearAll');
    await vscode.commands.executeCommand('workbench.action.closeAllEditors');
    const from = api.notices.shown.length;
    const failed = await runToEnd('failer');
    assert.equal(failed.status, 'failed');
    const notice = await waitFor(() => api.notices.shown.slice(from).find((n) => /failer failed/.test(n.text)), {
      what: 'the failed-run notification',
      timeoutMs: 10_000,
    });
    assert.equal(notice.level, 'error');
    assert.deepEqual(notice.actions, ['Show Log']);
    // Click the button on the page, as the operator does (in the notification centre: the test
    // workbench shows no toasts).
    await vscode.commands.executeCommand('notifications.showList');
    await queryPage('.notifications-center .monaco-button', { waitText: 'Show Log', click: true, timeoutMs: 15_000 });
    await vscode.commands.executeCommand('notifications.hideList');
    const doc = await waitFor(
      () =>
        vscode.window.visibleTextEditors
          .map((e) => e.document)
          .find((d) => /failer/.test(d.uri.path) && /boom: the source answered 503/.test(d.getText())),
      { what: 'the failed run’s log in an editor', timeoutMs: 15_000, intervalMs: 100 },
    );
    assert.equal(doc.uri.path.split('/')[1], failed.runId, 'the log of that run');

    await setting('quantilica.notifications', 'failedRuns', false);
    try {
      const quiet = api.notices.shown.length;
      const again = await runToEnd('failer');
      await waitFor(() => api.runs.run(again.runId)?.status === 'failed', {
        what: 'the second failure in the Runs view (the notifier hears the same event)',
        timeoutMs: 10_000,
      });
      assert.deepEqual(
        api.notices.shown
          .slice(quiet)
          .filter((n) => /failer failed/.test(n.text))
          .map((n) => n.text),
        [],
        'switched off: no notification',
      );
    } finally {
      await setting('quantilica.notifications', 'failedRuns', undefined);
    }

    const hog = await runToEnd('hog');
    assert.equal(hog.status, 'completed');
    assert.ok(
      hog.peakMemoryMb !== null && hog.peakMemoryMb !== undefined && hog.peakMemoryMb >= 20,
      `the agent recorded the hog's peak (${hog.peakMemoryMb} MB)`,
    );
    const row = await waitFor(
      () => {
        const node = api.runs
          .getChildren()
          .flatMap((d) => api.runs.getChildren(d))
          .find((n) => n.kind === 'run' && n.runId === hog.runId);
        const item = node && api.runs.getTreeItem(node);
        return item && /completed/.test(String(item.description)) ? item : undefined;
      },
      { what: 'the hog’s row, completed', timeoutMs: 10_000 },
    );
    const peak = gbWords(hog.peakMemoryMb / 1024);
    assert.ok(String(row.description).includes(`· peak ${peak}`), String(row.description));
    const tooltip = row.tooltip instanceof vscode.MarkdownString ? row.tooltip.value : String(row.tooltip);
    // The tooltip is Markdown: its dots are escaped.
    assert.ok(tooltip.includes(`Memory: peak ${peak.replace('.', '\\.')}`), tooltip);
    assert.match(row.accessibilityInformation?.label ?? '', /peak memory [\d.]+ gigabytes/);
    await stopAgent();
  });
});
