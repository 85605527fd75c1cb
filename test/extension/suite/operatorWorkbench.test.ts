// The workbench in daily use, in a real extension host against real agents: Restart Agent keeps the queue
// (the waiting runs resume under the new agent in their order), the live log follows its tail, Pause
// Schedule asks which (and confirms all) with the whole-schedule pause in the view's header, history rows
// have a keyboard-reachable context menu, the Station panel says the agent is down and is restored by its
// serializer, no telemetry warning without a database, a filter that matches nothing says so with Clear,
// a run that never started says why in its log, the words of the reason tokens, plain accessible labels,
// a quiet output, and the run policies' words.
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as vscode from 'vscode';
import { connectAgent } from '../../../agent/client/agentClient';
import { durationWords, plural, REASON_WORDS, WAIT_KIND_WORDS } from '../../../shared/humanWords';
import { RUN_REASONS, type RunInfo, type Snapshot } from '../../../shared/protocol';
import type { QuantilicaApi } from '../../../extension/extension';
import { policyNotices } from '../../../extension/operatorEvents';
import { outcome } from '../../../extension/runPresentation';
import type { RunsNode } from '../../../extension/runsTreeProvider';
import { ScheduleTreeProvider } from '../../../extension/scheduleTreeProvider';
import { waitFor } from '../../support/waitFor';
import { AgentProcesses } from './agentProcesses';
import { queryPage, requestScreenshot } from './screenshot';

const EXTENSION_ID = 'quantilica.quantilica-orchestrator';
const home = process.env.HOME ?? '';
const connectionFile = path.join(home, '.quantilica', 'agent.json');
const repo = path.resolve(__dirname, '..', '..', '..', '..');
const agents = new AgentProcesses(
  path.join(repo, 'dist', 'agent.js'),
  process.env.QUANTILICA_TEST_NODE ?? 'node',
  path.join(home, 'agent-logs'),
);

/** ticker prints a line every 0.2 s for a minute; two scheduled fetchers; failer exits 3. */
function writeCatalog(): string {
  const dir = path.join(home, 'workbench-catalog');
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'catalog.json');
  const bash = (script: string) => ['/bin/bash', '-c', script];
  fs.writeFileSync(
    file,
    JSON.stringify(
      {
        fetchers: [
          { name: 'ticker', pool: 'network-light', argv: bash('for i in $(seq 1 300); do echo "tick $i"; sleep 0.2; done') },
          { name: 'failer', pool: 'cpu-analysis', argv: bash('echo "boom"; exit 3') },
          { name: 'morning', pool: 'cpu-analysis', argv: bash('echo "morning ok"'), schedule: '0 3 * * *' },
          { name: 'evening', pool: 'heavy-io', argv: bash('echo "evening ok"'), schedule: '30 20 * * *' },
        ],
      },
      null,
      2,
    ),
  );
  return file;
}
const catalog = writeCatalog();

let api: QuantilicaApi;
let agentPid = 0;

async function startAgent(env: Record<string, string> = {}): Promise<void> {
  agentPid = (await agents.start({ QUANTILICA_CATALOG: catalog, CRON_DISK_POLL_SECONDS: '0.5', ...env })).pid ?? 0;
  await waitFor(() => api.session.state.kind === 'connected' && api.session.state.info.pid === agentPid, {
    what: 'the extension to connect to the new agent',
    timeoutMs: 20_000,
  });
}

async function stopAgent(): Promise<void> {
  await agents.stop(agentPid);
  if (api.session.state.kind === 'connected') await agents.stop(api.session.state.info.pid);
  await waitFor(() => api.session.state.kind === 'down', { what: 'the session to see the agent go', timeoutMs: 15_000 });
}

async function agentRuns(): Promise<RunInfo[]> {
  const client = await connectAgent(connectionFile, { client: 'workbench-suite' });
  try {
    return await client.listRuns(100);
  } finally {
    await client.close();
  }
}

async function runToEnd(fetcher: string): Promise<RunInfo> {
  const queued = await vscode.commands.executeCommand<RunInfo | undefined>('quantilica.runFetcher', fetcher);
  assert.ok(queued, `${fetcher} was queued`);
  return waitFor(
    async () => (await agentRuns()).find((r) => r.runId === queued.runId && r.status !== 'running' && r.status !== 'waiting'),
    { what: `${fetcher} to end`, timeoutMs: 30_000, intervalMs: 200 },
  );
}

function label(item: vscode.TreeItem): string {
  return typeof item.label === 'string' ? item.label : (item.label?.label ?? '');
}

function runRow(runId: string): { node: RunsNode; item: vscode.TreeItem } | undefined {
  const node = api.runs
    .getChildren()
    .flatMap((d) => api.runs.getChildren(d))
    .find((n) => n.kind === 'run' && n.runId === runId);
  return node ? { node, item: api.runs.getTreeItem(node) } : undefined;
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

type Menu = { command: string; when?: string; group?: string };
function manifest(): {
  activationEvents: string[];
  contributes: {
    menus: Record<string, Menu[]>;
    viewsWelcome: Array<{ view: string; contents: string; when?: string }>;
    configuration: { properties: Record<string, unknown> };
  };
} {
  return vscode.extensions.getExtension(EXTENSION_ID)!.packageJSON as ReturnType<typeof manifest>;
}

/** Evaluates the when-clauses the menus use (`&&` of `==`, `!=`, `=~ /re/` and bare keys) for a context. */
function holds(when: string | undefined, context: Record<string, string | boolean>): boolean {
  return (when ?? '')
    .split('&&')
    .map((t) => t.trim())
    .filter((t) => t !== '')
    .every((term) => {
      let m = /^(!?)([\w.]+)$/.exec(term);
      if (m) return Boolean(context[m[2]]) !== (m[1] === '!');
      m = /^([\w.]+)\s*(==|!=)\s*(\S+)$/.exec(term);
      if (m) return (String(context[m[1]]) === m[3]) === (m[2] === '==');
      m = /^([\w.]+)\s*=~\s*\/(.*)\/$/.exec(term);
      if (m) return new RegExp(m[2]).test(String(context[m[1]] ?? ''));
      throw new Error(`a when-clause term this check does not understand: ${term}`);
    });
}

/** "14:05" as the extension writes a time of day. */
function hhmm(iso: string): string {
  return new Date(iso).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
}

function runInfo(over: Partial<RunInfo>): RunInfo {
  return {
    runId: 'r-1',
    fetcher: 'comex',
    pool: 'heavy-io',
    status: 'waiting',
    trigger: 'protocol',
    args: [],
    enqueuedAt: new Date().toISOString(),
    startedAt: null,
    finishedAt: null,
    slot: null,
    pid: null,
    exitCode: null,
    signal: null,
    reason: null,
    wait: null,
    logPath: null,
    ...over,
  };
}

describe('The workbench in daily use', () => {
  before(async () => {
    const extension = vscode.extensions.getExtension<QuantilicaApi>(EXTENSION_ID);
    assert.ok(extension);
    api = await extension.activate();
    await waitFor(() => api.session.state.kind !== 'connected', { what: 'no agent from an earlier suite', timeoutMs: 30_000 });
    await vscode.commands.executeCommand('workbench.view.extension.quantilica');
  });

  after(async () => {
    await agents.stopAll();
    if (agentPid > 0) await agents.stop(agentPid);
  });

  it('one table of words: every reason token and wait kind, durations, plurals, GB, retries, timeouts, stalls and lateness', () => {
    for (const token of RUN_REASONS) {
      const words = REASON_WORDS[token];
      assert.ok(words && words.length > 0, `${token} has words`);
      if (token !== 'starting') assert.notEqual(words, token, `${token} is said in words, not as its token`);
    }
    for (const kind of ['pool', 'disk', 'admission', 'hibernating', 'retry', 'slot-backend'] as const)
      assert.ok(WAIT_KIND_WORDS[kind], `the wait kind ${kind} has words`);
    assert.equal(durationWords(1), '1 second');
    assert.equal(durationWords(21600), '6 h');
    assert.equal(durationWords(7500), '2 h 5 min');
    assert.equal(plural(1, 'run'), '1 run');
    assert.equal(plural(2, 'run'), '2 runs');

    const at = new Date(Date.now() + 5 * 60_000).toISOString();
    const retrying = runInfo({
      status: 'waiting',
      reason: 'retry-backoff',
      wait: { kind: 'retry', until: at, attempt: 2 },
      attempt: 1,
      attempts: 3,
    });
    assert.equal(outcome(retrying), `attempt 2 of 3 · retry at ${hhmm(at)}`);
    const finished = new Date().toISOString();
    const timedOut = runInfo({ status: 'failed', reason: 'timeout', startedAt: finished, finishedAt: finished, attempt: 3, attempts: 3 });
    assert.equal(outcome(timedOut), `failed · ran past its time limit at ${hhmm(finished)} · attempt 3 of 3`);
    const stalledAt = new Date(Date.now() - 60_000).toISOString();
    const stalled = runInfo({ status: 'running', startedAt: stalledAt, stalledSince: stalledAt });
    assert.match(outcome(stalled), new RegExp(`^running for \\d+ (seconds?|min) · stalled since ${hhmm(stalledAt)}$`));
    const gate = runInfo({ status: 'failed', reason: 'disk-backpressure-timeout', finishedAt: finished });
    assert.equal(outcome(gate), 'failed · waited too long for free disk space', 'no "failed (failed · …)" and no raw token');
    const disk = runInfo({ status: 'waiting', wait: { kind: 'disk', state: 'paused', freeGb: 0.06, resumeGb: 0.1 } });
    assert.equal(outcome(disk), 'waiting for free disk space: needs 0.1 GB free, 0.06 GB now');

    // A late fetcher in the Schedule view, and the notices late and stalled give (each switchable).
    const lateSince = new Date(Date.now() - 30 * 60_000).toISOString();
    const entry = {
      fetcher: 'comex',
      cron: '0 3 * * *',
      timezone: null,
      nextDue: new Date(Date.now() + 3600_000).toISOString(),
      paused: false,
      lastRunAt: null,
      lateAfterMinutes: 20,
      lateSince,
      lastSuccessAt: null,
    };
    const base = {
      version: 1,
      agent: { pid: 1, host: 'h', startedAt: finished, protocolVersion: 1, mode: 'pools', dataDir: '/d', lockDir: '/l' },
      catalog: [],
      pools: [],
      runs: [],
      disk: null,
      spool: null,
      schedule: { paused: false, catchUp: false, entries: [{ ...entry, lateSince: null }] },
    } as Snapshot;
    const view = new ScheduleTreeProvider();
    try {
      view.update({ kind: 'reset', snapshot: { ...base, schedule: { paused: false, catchUp: false, entries: [entry] } } });
      const row = view.getTreeItem(view.getChildren()[0]);
      assert.match(String(row.description), new RegExp(`^late since ${hhmm(lateSince)} · in 1 h`));
      assert.equal((row.iconPath as vscode.ThemeIcon).id, 'warning');
      assert.match(row.accessibilityInformation?.label ?? '', /^comex, late since /);
    } finally {
      view.dispose();
    }
    const late = policyNotices(base, { kind: 'schedule', schedule: { paused: false, catchUp: false, entries: [entry] } });
    assert.deepEqual(
      late.map((n) => [n.kind, n.text]),
      [['late', `Quantilica: comex is late: no completed run within 20 min of its due time (late since ${hhmm(lateSince)}).`]],
    );
    assert.deepEqual(
      policyNotices(
        { ...base, schedule: { paused: false, catchUp: false, entries: [entry] } },
        { kind: 'schedule', schedule: { paused: false, catchUp: false, entries: [entry] } },
      ),
      [],
      'said once, when it becomes late',
    );
    const stall = policyNotices(
      { ...base, runs: [{ ...stalled, stalledSince: null }] },
      { kind: 'run', run: { ...stalled, logGrewAt: stalledAt } },
    );
    assert.deepEqual(
      stall.map((n) => [n.kind, n.text, n.actions]),
      [['stalled', `Quantilica: comex stalled: its log has not grown since ${hhmm(stalledAt)}.`, ['Show Log', 'Cancel Run']]],
    );
    const settings = manifest().contributes.configuration.properties;
    assert.ok(settings['quantilica.notifications.late'] && settings['quantilica.notifications.stalled'], 'a setting switches each off');
  });

  it('a late or stalled notice is not shown when its setting is off', async () => {
    for (const kind of ['late', 'stalled'] as const) {
      await setting('quantilica.notifications', kind, false);
      try {
        const from = api.notices.shown.length;
        await api.notices.maybe(kind, 'warning', `Quantilica: a ${kind} test notice.`);
        assert.equal(api.notices.shown.length, from, `${kind} off: nothing shown`);
      } finally {
        await setting('quantilica.notifications', kind, undefined);
      }
      const from = api.notices.shown.length;
      void api.notices.maybe(kind, 'warning', `Quantilica: a ${kind} test notice.`);
      assert.equal(api.notices.shown.length, from + 1, `${kind} on by default`);
    }
    await vscode.commands.executeCommand('notifications.clearAll');
  });

  it('connecting logs no "could not load the run history", and the words: VS Code as trigger, pool waits in hours, GB only, plain gauge label', async () => {
    const from = api.outputLines.length;
    await startAgent({ QUANTILICA_DATABASE_URL: '' });
    const failed = await runToEnd('failer');
    const row = await waitFor(
      () => {
        const r = runRow(failed.runId);
        return r && /failed/.test(String(r.item.description)) ? r : undefined;
      },
      { what: 'the failed run in the Runs view', timeoutMs: 10_000 },
    );
    assert.match(String(row.item.description), / · VS Code · /, 'a run started from VS Code says so');
    assert.doesNotMatch(String(row.item.description), /protocol|failed \(failed|exit-code/);
    const tooltip = row.item.tooltip instanceof vscode.MarkdownString ? row.item.tooltip.value : String(row.item.tooltip);
    assert.match(tooltip, /Trigger: VS Code/);
    const lines = api.outputLines.slice(from);
    assert.ok(
      lines.some((l) => /connected to the agent/.test(l)),
      lines.join('\n'),
    );
    assert.ok(!lines.some((l) => /could not load the run history/.test(l)), `no history error at connect:\n${lines.join('\n')}`);

    const pool = api.tree.getChildren().find((n) => n.kind === 'pool' && n.pool === 'heavy-io')!;
    const poolItem = api.tree.getTreeItem(pool);
    const poolTooltip = typeof poolItem.tooltip === 'string' ? poolItem.tooltip : (poolItem.tooltip?.value ?? '');
    const wait = api.session.snapshot!.pools.find((p) => p.name === 'heavy-io')!.waitTimeoutSeconds;
    assert.match(poolTooltip, new RegExp(`waits at most ${durationWords(wait)}\\)`));
    assert.doesNotMatch(poolTooltip, /\d+ s\)/);
    for (const text of [String(poolItem.description), api.disk.view.text]) assert.doesNotMatch(text, /\bMB\b/, `one unit: ${text}`);
    const spoken = api.disk.view.accessibleLabel;
    assert.match(spoken, /^Quantilica disk gate \w+: .* gigabytes/);
    assert.doesNotMatch(spoken, /\*\*|\||\$\(|\\/, `plain text, not Markdown: ${spoken}`);
    assert.match(spoken, /local only, no database is configured/);
    // Today, with the filter on this one run: "1 run", read as "Today, 1 run".
    await vscode.commands.executeCommand('quantilica.filterRuns', { fetcher: 'failer' });
    try {
      const today = api.runs
        .getChildren()
        .map((d) => api.runs.getTreeItem(d))
        .find((d) => d.label === 'Today');
      const count = api.runs.getChildren()[0] ? api.runs.getChildren(api.runs.getChildren()[0]).length : 0;
      assert.ok(today);
      assert.equal(today.description, plural(count, 'run'));
      assert.equal(today.accessibilityInformation?.label, `Today, ${plural(count, 'run')}`);
    } finally {
      await vscode.commands.executeCommand('quantilica.clearRunsFilter');
    }
  });

  it('no telemetry warning when no database is configured: the spool is local by choice, and the gauge says so', async () => {
    // The agent of the previous test has no database.
    assert.equal(api.session.snapshot?.spool?.database, 'not-configured');
    agents.emitEvent('local-a');
    agents.emitEvent('local-b');
    await setting('quantilica.telemetry', 'staleMinutes', 0.05);
    try {
      await waitFor(() => (api.session.snapshot?.spool?.pending ?? 0) >= 2 && (api.telemetry.oldestAgeSeconds ?? 0) > 4, {
        what: 'events older than the 3 s setting',
        timeoutMs: 30_000,
        intervalMs: 200,
      });
      // Rendered now, past the limit (its own ticker renders every 5 s).
      api.telemetry.set(api.session.snapshot?.spool ?? null);
      assert.equal(api.telemetry.visible, false, 'no "telemetry N min behind" without a database');
      assert.match(api.disk.view.tooltip, /local only — no database is configured/);
      const bar = ((await queryPage('.part.statusbar')) ?? []).join('\n');
      assert.doesNotMatch(bar, /telemetry .* behind/);
    } finally {
      await setting('quantilica.telemetry', 'staleMinutes', undefined);
    }
  });

  it('the live log follows its tail while the cursor is at the end: with Follow Run Log, not when moved up, again after Ctrl+End', async () => {
    await vscode.commands.executeCommand('workbench.action.closeAllEditors');
    const queued = await vscode.commands.executeCommand<RunInfo | undefined>('quantilica.runFetcher', 'ticker');
    assert.ok(queued);
    await waitFor(() => api.session.snapshot?.runs.find((r) => r.runId === queued.runId)?.status === 'running', {
      what: 'ticker running',
      timeoutMs: 15_000,
    });
    try {
      const editor = await vscode.commands.executeCommand<vscode.TextEditor | undefined>('quantilica.followRunLog', queued.runId);
      assert.ok(editor);
      const lastLine = () => editor.document.lineCount - 1;
      const followsTail = async (what: string) => {
        const lines = editor.document.lineCount;
        await waitFor(() => editor.document.lineCount > lines + 2 && editor.selection.active.line === lastLine(), {
          what: `${what}: the cursor at the new end`,
          timeoutMs: 15_000,
          intervalMs: 50,
        });
        // The visible range reaches the extension host after the scroll, while lines keep coming.
        await waitFor(() => (editor.visibleRanges.at(-1)?.end.line ?? 0) >= lastLine() - 2, {
          what: `${what}: the last line in view (${editor.visibleRanges.at(-1)?.end.line} of ${lastLine()})`,
          timeoutMs: 10_000,
          intervalMs: 20,
        });
      };
      await followsTail('Follow Run Log');
      await followsTail('still following');
      // Moved up: the view stays where the operator put it.
      editor.selection = new vscode.Selection(0, 0, 0, 0);
      const lines = editor.document.lineCount;
      await waitFor(() => editor.document.lineCount > lines + 2, { what: 'more lines', timeoutMs: 15_000, intervalMs: 50 });
      assert.equal(editor.selection.active.line, 0, 'not following while the cursor is elsewhere');
      // Ctrl+End, as the operator presses it: following again.
      await vscode.window.showTextDocument(editor.document, editor.viewColumn);
      await vscode.commands.executeCommand('cursorBottom');
      await followsTail('after Ctrl+End');
    } finally {
      await vscode.commands.executeCommand('quantilica.cancelRun', queued.runId);
      await vscode.commands.executeCommand('workbench.action.closeAllEditors');
    }
  });

  it('history rows have Run Again, Show Log and Copy Run Id in a context menu, opened from the keyboard; Run Again is in the palette', async () => {
    // No run active (the newest row is a finished one, so its menu has Run Again).
    await waitFor(() => !api.session.snapshot?.runs.some((r) => r.status === 'running' || r.status === 'waiting'), {
      what: 'no active run',
      timeoutMs: 15_000,
    });
    const done = await runToEnd('failer');
    const row = await waitFor(
      () => {
        const r = runRow(done.runId);
        return r && r.item.contextValue === 'runs.failed' ? r : undefined;
      },
      { what: 'the failed row', timeoutMs: 10_000 },
    );
    const menus = manifest().contributes.menus;
    for (const status of ['completed', 'failed', 'cancelled']) {
      const context = { view: 'quantilica.runs', viewItem: `runs.${status}`, 'quantilica.agentState': 'connected' };
      const menu = menus['view/item/context'].filter((m) => !m.group?.startsWith('inline') && holds(m.when, context)).map((m) => m.command);
      for (const command of [
        'quantilica.runAgain',
        'quantilica.copyRunId',
        ...(status === 'cancelled' || status === 'failed' || status === 'completed' ? ['quantilica.showRunLog'] : []),
      ]) {
        assert.ok(menu.includes(command), `${command} in the context menu of a ${status} row (${menu.join(', ')})`);
      }
    }
    const palette = menus.commandPalette.find((m) => m.command === 'quantilica.runAgain');
    assert.ok(palette && holds(palette.when, { 'quantilica.agentState': 'connected' }), 'Run Again in the palette while connected');

    // The keyboard, as the operator goes: the view focused, Home (today), Down (its newest run),
    // Shift+F10 opens that row's menu.
    await vscode.commands.executeCommand('quantilica.runs.focus');
    // The provider already has the run; the workbench draws its row a moment later, and a key pressed
    // before that moves to the row that was there. The newest run is drawn at index 1 (under Today),
    // absolutely placed in the list, so found by its index and not its place in the page.
    const drawn = await queryPage('.part.sidebar .monaco-list-row[data-index="1"][aria-level="2"]', {
      waitText: 'failed',
      timeoutMs: 15_000,
    });
    const focused = drawn === null ? null : await queryPage('.part.sidebar', { press: 'Home' });
    if (focused !== null) {
      await queryPage('.part.sidebar', { press: 'ArrowDown' });
      await queryPage('.part.sidebar .monaco-list-row.focused[data-index="1"]', { waitText: 'failed', timeoutMs: 10_000 });
      const menu = await queryPage('.monaco-menu .action-label', { press: 'Shift+F10', waitText: 'Copy Run Id', timeoutMs: 10_000 });
      for (const entry of ['Run Again', 'Show Run Log', 'Copy Run Id'])
        assert.ok(menu?.includes(entry), `${entry} in the menu on the page (${menu?.join(', ')})`);
      await queryPage('.part.sidebar', { press: 'Escape' });
    }
    const copied = await vscode.commands.executeCommand<string | undefined>('quantilica.copyRunId', row.node);
    assert.equal(copied, done.runId);
    assert.equal(await vscode.env.clipboard.readText(), done.runId);

    // Run Again from the palette: it asks which run, the history's newest first.
    const picks = api.notices.picks.length;
    const again = vscode.commands.executeCommand<RunInfo | undefined>('quantilica.runAgain');
    const asked = await waitFor(() => api.notices.picks.slice(picks).find((p) => p.title === 'Run which fetcher again?'), {
      what: 'the Run Again picker',
      timeoutMs: 10_000,
    });
    assert.ok(asked.items.includes('failer'));
    const clicked = await queryPage('.quick-input-widget .monaco-list-row', { waitText: done.runId, click: true, timeoutMs: 10_000 });
    if (clicked === null) await vscode.commands.executeCommand('workbench.action.acceptSelectedQuickOpenItem');
    const rerun = await again;
    assert.ok(rerun, 'a run queued from the picker');
  });

  it('a filter that matches nothing says so, with Clear', async () => {
    await vscode.commands.executeCommand('quantilica.filterRuns', { fetcher: 'failer', status: 'skipped' });
    await waitFor(() => api.contextKeys.get('quantilica.runsFilterEmpty') === true, { what: 'the filter-empty key', timeoutMs: 5000 });
    const welcome = manifest().contributes.viewsWelcome.filter(
      (w) => w.view === 'quantilica.runs' && holds(w.when, { 'quantilica.agentState': 'connected', 'quantilica.runsFilterEmpty': true }),
    );
    assert.deepEqual(
      welcome.map((w) => w.contents),
      ["The filter shown in this view's title matched none of the runs listed.\n[Clear Filter](command:quantilica.clearRunsFilter)"],
      'only the filter message, not "No runs yet"',
    );
    await vscode.commands.executeCommand('quantilica.runs.focus');
    const page = await queryPage('.part.sidebar', { waitText: 'matched none of the runs', timeoutMs: 10_000 });
    if (page !== null) {
      assert.ok(
        page.some((t) => /matched none of the runs/.test(t) && /Clear Filter/.test(t)),
        page.join('\n'),
      );
      await requestScreenshot('runs-filter-empty');
      await queryPage('.part.sidebar .monaco-button', { waitText: 'Clear Filter', click: true, timeoutMs: 10_000 });
    } else {
      await vscode.commands.executeCommand('quantilica.clearRunsFilter');
    }
    await waitFor(
      () => api.contextKeys.get('quantilica.runsFilterEmpty') === false && api.contextKeys.get('quantilica.runsFiltered') === false,
      { what: 'Clear to clear the filter', timeoutMs: 10_000 },
    );
  });

  it('Pause Schedule from the palette asks which and confirms all; the header says the whole schedule is paused, with Resume; its rows offer no Pause', async () => {
    const menus = manifest().contributes.menus;
    const click = async (text: string) => {
      const clicked = await queryPage('.quick-input-widget .monaco-list-row', { waitText: text, click: true, timeoutMs: 10_000 });
      if (clicked === null) await vscode.commands.executeCommand('workbench.action.acceptSelectedQuickOpenItem');
    };
    // One fetcher.
    let picks = api.notices.picks.length;
    const one = vscode.commands.executeCommand('quantilica.pauseSchedule');
    const asked = await waitFor(() => api.notices.picks.slice(picks).find((p) => p.title === 'Pause the schedule of which fetcher?'), {
      what: 'the pause picker',
      timeoutMs: 10_000,
    });
    assert.equal(asked.items[0], 'All Fetchers');
    assert.deepEqual(asked.items.slice(1).sort(), ['evening', 'morning']);
    await click('morning');
    await one;
    await waitFor(() => api.schedule.entry('morning')?.paused === true, { what: 'morning paused', timeoutMs: 10_000 });
    assert.equal(api.session.snapshot?.schedule?.paused, false, 'one fetcher, not the schedule');
    await vscode.commands.executeCommand('quantilica.resumeSchedule', 'morning');

    // All, refused at the confirmation: nothing paused.
    picks = api.notices.picks.length;
    const refused = vscode.commands.executeCommand('quantilica.pauseSchedule');
    await waitFor(() => api.notices.picks.slice(picks).some((p) => p.title === 'Pause the schedule of which fetcher?'), {
      what: 'the picker',
      timeoutMs: 10_000,
    });
    await click('All Fetchers');
    const confirm = await waitFor(() => api.notices.picks.slice(picks).find((p) => /^Pause all \d+ scheduled fetchers\?$/.test(p.title)), {
      what: 'the confirmation',
      timeoutMs: 10_000,
    });
    assert.deepEqual(confirm.items, ['Cancel', 'Pause the Whole Schedule']);
    await click('Cancel');
    await refused;
    assert.equal(api.session.snapshot?.schedule?.paused, false, 'Cancel pauses nothing');

    // All, confirmed.
    picks = api.notices.picks.length;
    const all = vscode.commands.executeCommand('quantilica.pauseSchedule');
    await waitFor(() => api.notices.picks.slice(picks).some((p) => p.title === 'Pause the schedule of which fetcher?'), {
      what: 'the picker',
      timeoutMs: 10_000,
    });
    await click('All Fetchers');
    await waitFor(() => api.notices.picks.slice(picks).some((p) => /^Pause all/.test(p.title)), {
      what: 'the confirmation',
      timeoutMs: 10_000,
    });
    await click('Pause the Whole Schedule');
    await all;
    await waitFor(() => api.views.schedule.description === 'the whole schedule is paused', {
      what: 'the header to say so',
      timeoutMs: 10_000,
    });
    assert.equal(api.contextKeys.get('quantilica.schedulePaused'), true);
    const title = menus['view/title']
      .filter((m) =>
        holds(m.when, { view: 'quantilica.schedule', 'quantilica.schedulePaused': true, 'quantilica.agentState': 'connected' }),
      )
      .map((m) => m.command);
    assert.deepEqual(title, ['quantilica.resumeWholeSchedule'], 'Resume in the header');
    for (const node of api.schedule.getChildren()) {
      const row = api.schedule.getTreeItem(node);
      assert.equal(row.contextValue, 'schedule.heldByWholePause');
      assert.match(String(row.description), /^paused with the whole schedule/);
      const inline = menus['view/item/context']
        .filter((m) =>
          holds(m.when, { view: 'quantilica.schedule', viewItem: row.contextValue ?? '', 'quantilica.agentState': 'connected' }),
        )
        .map((m) => m.command);
      assert.ok(!inline.includes('quantilica.pauseSchedule'), `${label(row)} offers no Pause under the whole-schedule pause`);
    }
    await vscode.commands.executeCommand('quantilica.schedule.focus');
    const header = await queryPage('.pane-header', { waitText: 'the whole schedule is paused', timeoutMs: 10_000 });
    if (header !== null) assert.ok(header.some((t) => /the whole schedule is paused/.test(t)));
    await requestScreenshot('schedule-paused');
    await vscode.commands.executeCommand('quantilica.resumeWholeSchedule');
    await waitFor(() => api.views.schedule.description === undefined && api.contextKeys.get('quantilica.schedulePaused') === false, {
      what: 'the header mark to go',
      timeoutMs: 10_000,
    });
  });

  it('Restart Agent keeps the queue: the waiting runs resume under the new agent, in their order, each once, none cancelled', async () => {
    // The launcher's own agent (the demo catalog, the suite's station settings), so the restart starts the same one again.
    if (api.session.state.kind === 'connected') await stopAgent();
    const first = await vscode.commands.executeCommand<number | undefined>('quantilica.startAgent');
    assert.ok(first, 'the extension started an agent');
    agentPid = first;
    const fetchersOf = (pool: string) =>
      (api.session.snapshot?.catalog ?? []).filter((e) => e.pool === pool && e.kind !== 'github-sync').map((e) => e.name);
    // A pool with two fetchers more than its slots: two runs wait behind its full slots.
    const pool = await waitFor(
      () => [...(api.session.snapshot?.pools ?? [])].sort((a, b) => a.size - b.size).find((p) => fetchersOf(p.name).length >= p.size + 2),
      { what: 'a pool with two fetchers more than its slots', timeoutMs: 15_000 },
    );
    const fetchers = fetchersOf(pool.name);
    const queued: RunInfo[] = [];
    try {
      for (const fetcher of fetchers.slice(0, pool.size + 2)) {
        const run = await vscode.commands.executeCommand<RunInfo | undefined>('quantilica.runFetcher', fetcher);
        assert.ok(run, `${fetcher} was queued`);
        queued.push(run);
      }
      const holders = queued.slice(0, pool.size);
      const waiters = queued.slice(pool.size);
      await waitFor(
        async () => {
          const runs = await agentRuns();
          return (
            holders.every((h) => runs.find((r) => r.runId === h.runId)?.status === 'running') &&
            waiters.every((w) => runs.find((r) => r.runId === w.runId)?.status === 'waiting')
          );
        },
        { what: `the ${pool.name} slots held and two runs waiting`, timeoutMs: 30_000, intervalMs: 200 },
      );

      const pid = await vscode.commands.executeCommand<number | undefined>('quantilica.restartAgent');
      assert.ok(pid !== undefined && pid !== first, `a new agent (was ${first}, now ${pid})`);
      agentPid = pid;
      // The suite's station stops its fetchers on exit: the slots come free, and the kept queue takes them.
      const resumed = await waitFor(
        async () => {
          const runs = await agentRuns();
          const mine = waiters.map((w) => runs.find((r) => r.runId === w.runId));
          return mine.every((r) => r?.status === 'running') ? { runs, mine: mine as RunInfo[] } : undefined;
        },
        { what: 'the waiting runs to start under the new agent', timeoutMs: 60_000, intervalMs: 200 },
      );
      for (const [i, r] of resumed.mine.entries()) {
        assert.equal(r.enqueuedAt, waiters[i].enqueuedAt, `${r.fetcher} keeps its enqueue time`);
        assert.equal(r.trigger, waiters[i].trigger, `${r.fetcher} keeps its trigger`);
        assert.equal(resumed.runs.filter((x) => x.fetcher === r.fetcher).length, 1, `${r.fetcher} ran once: the kept run, no second one`);
      }
      assert.ok(Date.parse(resumed.mine[0].startedAt!) <= Date.parse(resumed.mine[1].startedAt!), 'in their order');
      // What the operator sees: the views name them running, not "cancelled".
      await waitFor(() => waiters.every((w) => api.session.snapshot?.runs.find((r) => r.runId === w.runId)?.status === 'running'), {
        what: 'the views to show them running',
        timeoutMs: 15_000,
      });
    } finally {
      const active = new Set(
        (await agentRuns().catch(() => [])).filter((r) => r.status === 'running' || r.status === 'waiting').map((r) => r.runId),
      );
      for (const r of queued) if (active.has(r.runId)) await vscode.commands.executeCommand('quantilica.cancelRun', r.runId);
    }
  });

  it('Restart Agent is no warning, and a stop logs no "Server will not be restarted" nor "Stopping server failed"', async () => {
    const from = api.outputLines.length;
    const pid = await vscode.commands.executeCommand<number | undefined>('quantilica.restartAgent');
    assert.ok(pid);
    agentPid = pid;
    let lines = api.outputLines.slice(from);
    assert.ok(
      lines.some((l) => /disconnected while the agent stops on purpose/.test(l)),
      lines.join('\n'),
    );
    assert.ok(!lines.some((l) => /^disconnected: /.test(l)), `a restart on purpose is not a warning:\n${lines.join('\n')}`);
    const stopFrom = api.outputLines.length;
    await stopAgent();
    await waitFor(() => api.outputLines.slice(stopFrom).some((l) => /disconnected/.test(l)), {
      what: 'the session to log the loss',
      timeoutMs: 10_000,
    });
    lines = api.outputLines.slice(from);
    assert.ok(!lines.some((l) => /Server will not be restarted|Stopping server failed/.test(l)), lines.join('\n'));
  });

  it('the Station panel with the agent down says so, with Start Agent, and logs "no history" never; it draws again when one answers; 1 h / 6 h / 24 h; a reload restores it', async () => {
    assert.equal(api.session.state.kind, 'down');
    const from = api.outputLines.length;
    await vscode.commands.executeCommand('quantilica.openStation');
    const down = await waitFor(() => (api.station.lastRendered?.down ? api.station.lastRendered : undefined), {
      what: 'the down message in the panel',
      timeoutMs: 20_000,
    });
    assert.match(down.down ?? '', /agent is not running/);
    assert.equal(down.canStart, true, 'Start Agent offered');
    assert.equal(down.canvases, 0, 'no empty charts under "Loading…"');
    await api.station.refresh();
    await api.station.refresh();
    assert.ok(!api.outputLines.slice(from).some((l) => /station panel: no history/.test(l)), 'no "no history" while the agent is down');
    await requestScreenshot('station-down');

    await startAgent();
    const drawn = await waitFor(
      () => {
        const r = api.station.lastRendered;
        return r && r.down === null && r.canvases === 2 ? r : undefined;
      },
      { what: 'the panel to draw once the agent answers', timeoutMs: 20_000 },
    );
    assert.deepEqual(
      drawn.ranges.map((r) => r.label),
      ['1 h', '6 h', '24 h'],
    );
    assert.equal(drawn.ranges.find((r) => r.pressed)?.label, `${drawn.hours} h`);
    await api.station.setRange(1);
    const hour = await waitFor(
      () => (api.station.lastRendered?.hours === 1 && api.station.lastRendered.canvases === 2 ? api.station.lastRendered : undefined),
      { what: 'the 1 h range', timeoutMs: 10_000 },
    );
    assert.equal(hour.ranges.find((r) => r.pressed)?.label, '1 h');

    assert.ok(manifest().activationEvents.includes('onWebviewPanel:quantilica.station'), 'a reload activates the extension for the panel');
    await vscode.commands.executeCommand('workbench.action.closeAllEditors');
    // What VS Code does after a reload: a panel of the view type, handed to the registered serializer with its state.
    const restored = vscode.window.createWebviewPanel('quantilica.station', 'Quantilica Station', vscode.ViewColumn.Active, {
      enableScripts: true,
    });
    await api.station.deserializeWebviewPanel(restored, { hours: 6 });
    const again = await waitFor(
      () => {
        const r = api.station.lastRendered;
        return r && r.hours === 6 && r.canvases === 2 ? r : undefined;
      },
      { what: 'the restored panel to draw with its 6 h', timeoutMs: 20_000 },
    );
    assert.equal(again.ranges.find((r) => r.pressed)?.label, '6 h');
    await vscode.commands.executeCommand('workbench.action.closeAllEditors');
    await stopAgent();
  });

  it('a run that failed at the disk gate says why in its log, and while it waited, how much disk it needs', async () => {
    await startAgent({
      CRON_DISK_PAUSE_GB: '100000',
      CRON_DISK_WARN_GB: '100001',
      CRON_DISK_RESUME_GB: '100002',
      CRON_DISK_MAX_WAIT_SECONDS: '4',
    });
    try {
      const from = api.notices.shown.length;
      const queued = await vscode.commands.executeCommand<RunInfo | undefined>('quantilica.runFetcher', 'morning');
      assert.ok(queued);
      const waiting = await waitFor(
        () => {
          const pool = api.tree.getChildren().find((n) => n.kind === 'pool' && n.pool === 'cpu-analysis');
          const group = pool && api.tree.getChildren(pool).find((n) => n.kind === 'waiting');
          const row = group && api.tree.getChildren(group).find((n) => n.kind === 'waitingRun' && n.runId === queued.runId);
          const item = row && api.tree.getTreeItem(row);
          return item && /needs/.test(String(item.description)) ? item : undefined;
        },
        { what: 'the run waiting at the gate, and why', timeoutMs: 10_000, intervalMs: 100 },
      );
      assert.match(String(waiting.description), /^waiting for free disk space: needs 100002 GB free, [\d.]+ GB now$/);
      assert.match(waiting.accessibilityInformation?.label ?? '', /needs 100002 GB free/);
      const failed = await waitFor(async () => (await agentRuns()).find((r) => r.runId === queued.runId && r.status === 'failed'), {
        what: 'the gate to fail the run',
        timeoutMs: 30_000,
        intervalMs: 200,
      });
      assert.equal(failed.reason, 'disk-backpressure-timeout');
      const notice = await waitFor(() => api.notices.shown.slice(from).find((n) => /morning failed/.test(n.text)), {
        what: 'the failure notice',
        timeoutMs: 10_000,
      });
      assert.equal(notice.text, 'Quantilica: morning failed (waited too long for free disk space).');
      await waitFor(() => api.session.snapshot?.runs.find((r) => r.runId === queued.runId)?.status === 'failed', {
        what: 'the failure in the snapshot',
        timeoutMs: 10_000,
      });
      const editor = await vscode.commands.executeCommand<vscode.TextEditor | undefined>('quantilica.showRunLog', queued.runId);
      assert.ok(editor);
      const text = await waitFor(() => /end of log/.test(editor.document.getText()) && editor.document.getText(), {
        what: 'the whole log',
        timeoutMs: 10_000,
      });
      assert.match(
        text,
        /\[quantilica [^\]]+\] morning never started: it ended failed while waiting, because waited too long for free disk space \(disk-backpressure-timeout\)/,
      );
      assert.match(text, /last it was waiting for free disk space: needs 100002 GB free/);
      await requestScreenshot('never-started-log');
    } finally {
      await vscode.commands.executeCommand('workbench.action.closeAllEditors');
      await stopAgent();
    }
  });
});
