// In a real extension host: the operator's day (run history, live logs, schedule, health,
// the defects seen in a real workbench), against a real agent running a catalog of real fetchers.
import * as assert from 'node:assert/strict';
import * as path from 'node:path';
import * as vscode from 'vscode';
import { connectAgent, type AgentClient } from '../../../agent/client/agentClient';
import type { RunInfo } from '../../../shared/protocol';
import type { QuantilicaApi } from '../../../extension/extension';
import { PoolTreeProvider } from '../../../extension/poolTreeProvider';
import type { RunsNode } from '../../../extension/runsTreeProvider';
import { waitFor } from '../../support/waitFor';
import { AgentProcesses } from './agentProcesses';
import { writeOperatorCatalog } from './operatorCatalog';
import { requestScreenshot } from './screenshot';

const EXTENSION_ID = 'quantilica.quantilica-orchestrator';
const home = process.env.HOME ?? '';
const connectionFile = path.join(home, '.quantilica', 'agent.json');
const repo = path.resolve(__dirname, '..', '..', '..', '..');
const agents = new AgentProcesses(
  path.join(repo, 'dist', 'agent.js'),
  process.env.QUANTILICA_TEST_NODE ?? 'node',
  path.join(home, 'agent-logs'),
);
const catalog = writeOperatorCatalog(path.join(home, 'operator-catalog'));

let api: QuantilicaApi;
let agentPid = 0;

async function truth<T>(read: (client: AgentClient) => T | Promise<T>): Promise<T> {
  const client = await connectAgent(connectionFile, { client: 'operator-suite' });
  try {
    return await read(client);
  } finally {
    await client.close();
  }
}

async function startAgent(env: Record<string, string> = {}): Promise<void> {
  agentPid = (await agents.start({ QUANTILICA_CATALOG: catalog, CRON_DISK_POLL_SECONDS: '0.5', ...env })).pid ?? 0;
  await waitFor(() => api.session.state.kind === 'connected' && api.session.state.info.pid === agentPid, {
    what: 'the extension to connect to the new agent',
    timeoutMs: 20_000,
  });
}

async function stopAgent(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  await agents.stop(agentPid, signal);
  await waitFor(() => api.session.state.kind === 'down', { what: 'the session to see the agent go', timeoutMs: 15_000 });
}

async function run(fetcher: string): Promise<RunInfo> {
  const queued = await vscode.commands.executeCommand<RunInfo | undefined>('quantilica.runFetcher', fetcher);
  assert.ok(queued, `${fetcher} was queued`);
  return queued;
}

function item(node: RunsNode): vscode.TreeItem {
  return api.runs.getTreeItem(node);
}

function runRows(): Array<{ node: RunsNode; item: vscode.TreeItem }> {
  return api.runs
    .getChildren()
    .flatMap((day) => api.runs.getChildren(day))
    .map((node) => ({ node, item: item(node) }));
}

function rowOf(runId: string): { node: RunsNode; item: vscode.TreeItem } | undefined {
  return runRows().find((r) => r.node.kind === 'run' && r.node.runId === runId);
}

function iconColour(i: vscode.TreeItem): string | undefined {
  return i.iconPath instanceof vscode.ThemeIcon ? i.iconPath.color?.id : undefined;
}

function label(i: vscode.TreeItem): string {
  return typeof i.label === 'string' ? i.label : (i.label?.label ?? '');
}

function text(value: string | vscode.MarkdownString | undefined): string {
  return typeof value === 'string' ? value : (value?.value ?? '');
}

describe('The operator’s day', () => {
  before(async () => {
    const extension = vscode.extensions.getExtension<QuantilicaApi>(EXTENSION_ID);
    assert.ok(extension);
    api = await extension.activate();
    // The development suite before this one stops its agents; start ours with the test catalog.
    await waitFor(() => api.session.state.kind !== 'connected', { what: 'no agent from an earlier suite', timeoutMs: 30_000 });
    await startAgent();
    await vscode.commands.executeCommand('workbench.view.extension.quantilica');
  });

  after(async () => {
    await agents.stopAll();
  });

  it('command titles are in Title Case; Run and Flush are offered only with a connected agent (and Flush with a database)', () => {
    const pkg = vscode.extensions.getExtension(EXTENSION_ID)!.packageJSON as {
      contributes: {
        commands: Array<{ command: string; title: string }>;
        menus: Record<string, Array<{ command: string; when?: string }>>;
        viewsWelcome: Array<{ contents: string; when?: string }>;
      };
    };
    for (const c of pkg.contributes.commands)
      assert.match(c.title, /^[A-Z][a-z]*( [A-Z][a-z]*)*$/, `${c.command}: "${c.title}" in Title Case`);
    const title = pkg.contributes.menus['view/title'] ?? [];
    for (const entry of title.filter((m) => m.command === 'quantilica.runFetcher' || m.command === 'quantilica.flushTelemetry')) {
      assert.match(entry.when ?? '', /quantilica\.agentState == connected/, `${entry.command} hidden while the agent is down`);
    }
    assert.ok(
      title.filter((m) => m.command === 'quantilica.flushTelemetry').every((m) => /quantilica\.hasDatabase/.test(m.when ?? '')),
      'Flush needs a database',
    );
    const welcome = pkg.contributes.viewsWelcome.find((w) => w.when === 'quantilica.agentState == down');
    assert.match(welcome?.contents ?? '', /reconnects by itself/);
    const inline = (pkg.contributes.menus['view/item/context'] ?? []).filter(
      (m) => m.command === 'quantilica.showRunLog' && /inline/.test((m as { group?: string }).group ?? ''),
    );
    assert.ok(inline.length >= 2, '"Show Run Log" is inline in Pools and Runs');
  });

  it('the run log document follows a running fetcher: it grows while the fetcher prints, and its title names the fetcher', async () => {
    const printer = await run('printer');
    const editor = await waitFor(
      async () => vscode.commands.executeCommand<vscode.TextEditor | undefined>('quantilica.showRunLog', printer.runId),
      { what: 'the log to open (the run has started)', timeoutMs: 15_000, intervalMs: 300 },
    );
    assert.match(editor.document.uri.path, /printer/, 'the tab title has the fetcher');
    const doc = editor.document;
    const early = await waitFor(() => /printer line 3\n/.test(doc.getText()) && doc.getText(), {
      what: 'the third line while the fetcher runs',
      timeoutMs: 20_000,
      intervalMs: 50,
    });
    const status = (await truth((c) => c.listRuns(50))).find((r) => r.runId === printer.runId)?.status;
    assert.equal(status, 'running', 'the line was shown before the fetcher ended');
    await waitFor(() => doc.getText().length > early.length && /printer line 8\n/.test(doc.getText()), {
      what: 'the document to grow with later lines',
      timeoutMs: 20_000,
      intervalMs: 50,
    });
    await waitFor(() => /printer line 40\n[\s\S]*completed: end of log/.test(doc.getText()), {
      what: 'every line and the end of the run',
      timeoutMs: 30_000,
      intervalMs: 100,
    });
    assert.equal(doc.getText().match(/printer line 17\n/g)?.length, 1, 'no line twice');
    await requestScreenshot('run-log');
  });

  it('an elapsed time ticks within 2 s, refreshing only the running slot, never the whole tree', async () => {
    const sleeper = await run('sleeper');
    // This run's slot, by its run id: the sleeper of the test before may still be listed a moment after
    // its end (a published state from between its end and its slot's release).
    const slot = await waitFor(
      () => {
        // Running, not starting: a run that holds its slot but whose process is being spawned shows as starting.
        if (api.session.snapshot?.runs.find((r) => r.runId === sleeper.runId)?.status !== 'running') return undefined;
        const held = api.session.snapshot?.pools.find((p) => p.name === 'heavy-io')?.slots.find((s) => s.holder?.runId === sleeper.runId);
        const pool = api.tree.getChildren().find((p) => p.pool === 'heavy-io');
        return (
          held &&
          pool &&
          api.tree.getChildren(pool).find((s) => s.kind === 'slot' && s.index === held.index && api.tree.getTreeItem(s).label === 'sleeper')
        );
      },
      { what: 'the sleeper in a slot', timeoutMs: 15_000 },
    );
    const fired: Array<string | undefined> = [];
    const sub = api.tree.onDidChangeTreeData((node) => fired.push(node?.id));
    try {
      const t0 = Date.now();
      await waitFor(() => fired.filter((id) => id === slot.id).length >= 2, {
        what: 'two refreshes of the running slot',
        timeoutMs: 3000,
        intervalMs: 20,
      });
      assert.ok(Date.now() - t0 < 3000);
      assert.ok(!fired.includes(undefined), `no whole-tree refresh (fired: ${fired.join(', ')})`);
    } finally {
      sub.dispose();
    }
    const before = String(api.tree.getTreeItem(slot).description);
    await waitFor(() => String(api.tree.getTreeItem(slot).description) !== before, {
      what: 'the elapsed time to change',
      timeoutMs: 2500,
      intervalMs: 50,
    });
    const checked = /Checked (\d+) seconds? ago/.exec(api.disk.view.tooltip)?.[0];
    assert.ok(checked, 'the gauge tooltip says when the disk was checked');
    await truth((c) => c.cancel({ runId: sleeper.runId }));
    // The next test starts another sleeper: without this wait it would be asked about a second run.
    await waitFor(() => api.session.snapshot?.runs.find((r) => r.runId === sleeper.runId)?.status === 'cancelled', {
      what: 'the sleeper to end',
      timeoutMs: 15_000,
    });
  });

  it('rows lead with the fetcher; tooltips in local time; coloured icons; screen-reader labels; a click opens the log', async () => {
    const sleeper = await run('sleeper');
    // This run's slot, by its run id: the sleeper of the test before may still be listed a moment after
    // its end (a published state from between its end and its slot's release).
    const slot = await waitFor(
      () => {
        // Running, not starting: a run that holds its slot but whose process is being spawned shows as starting.
        if (api.session.snapshot?.runs.find((r) => r.runId === sleeper.runId)?.status !== 'running') return undefined;
        const held = api.session.snapshot?.pools.find((p) => p.name === 'heavy-io')?.slots.find((s) => s.holder?.runId === sleeper.runId);
        const pool = api.tree.getChildren().find((p) => p.pool === 'heavy-io');
        return (
          held &&
          pool &&
          api.tree.getChildren(pool).find((s) => s.kind === 'slot' && s.index === held.index && api.tree.getTreeItem(s).label === 'sleeper')
        );
      },
      { what: 'the sleeper in a slot', timeoutMs: 15_000 },
    );
    const i = api.tree.getTreeItem(slot);
    assert.equal(i.label, 'sleeper');
    assert.match(String(i.description), /^slot \d+ · \d+ seconds?( · (under )?[\d.]+( of [\d.]+)? GB( \(sampled\))?)?$/);
    const tooltip = text(i.tooltip);
    assert.match(tooltip, /^\*\*sleeper\*\*/, 'the tooltip starts with the fetcher');
    assert.doesNotMatch(tooltip, /\d{4}-\d\d-\d\dT\d\d:\d\d/, 'no UTC ISO time');
    assert.match(tooltip, new RegExp(Intl.DateTimeFormat().resolvedOptions().timeZone.replace(/[/+]/g, '.')), 'the time zone is named');
    assert.equal(iconColour(i), 'charts.blue');
    assert.match(i.accessibilityInformation?.label ?? '', /^slot \d+ of heavy-io: sleeper, running/);
    assert.doesNotMatch(i.accessibilityInformation?.label ?? '', /[*`\\]/, 'no Markdown read aloud');
    assert.equal(i.command?.command, 'quantilica.showRunLog');
    // The same run a moment earlier, holding its slot while its process was spawned (reported `waiting`,
    // reason `starting`): it shows in its slot as starting, in blue, and not also under Waiting.
    const now = api.session.snapshot!;
    const view = new PoolTreeProvider();
    try {
      view.update({
        kind: 'reset',
        snapshot: {
          ...now,
          runs: now.runs.map((r) =>
            r.runId === sleeper.runId ? { ...r, status: 'waiting' as const, reason: 'starting' as const, startedAt: null } : r,
          ),
        },
      });
      const pool = view.getChildren().find((p) => p.pool === 'heavy-io')!;
      const starting = view.getTreeItem(
        view.getChildren(pool).find((n) => n.kind === 'slot' && slot.kind === 'slot' && n.index === slot.index)!,
      );
      assert.equal(iconColour(starting), 'charts.blue');
      assert.match(starting.accessibilityInformation?.label ?? '', /^slot \d+ of heavy-io: sleeper, starting, /);
      assert.doesNotMatch(starting.accessibilityInformation?.label ?? '', /waiting|reason/);
      const waiting = view.getChildren(pool).find((n) => n.kind === 'waiting');
      assert.ok(
        !waiting || !view.getChildren(waiting).some((n) => n.kind === 'waitingRun' && n.runId === sleeper.runId),
        'a starting run is not listed as waiting',
      );
    } finally {
      view.dispose();
    }
    const editor = await vscode.commands.executeCommand<vscode.TextEditor>(
      i.command.command,
      ...((i.command.arguments ?? []) as unknown[]),
    );
    await waitFor(() => editor?.document.getText().includes('sleeper starts'), { what: 'the clicked run’s log', timeoutMs: 10_000 });
    // The fetcher pick: grouped by pool, the running one says so; a second run is asked first.
    const items = api.fetcherPickItems(api.session.snapshot!);
    const separators = items.filter((it) => it.kind === vscode.QuickPickItemKind.Separator).map((it) => it.label);
    assert.deepEqual(separators.sort(), ['cpu-analysis', 'heavy-io', 'network-light']);
    assert.match(items.find((it) => it.label === 'sleeper')?.description ?? '', /^running now/);
    const asked = api.notices.asked.length;
    const second = vscode.commands.executeCommand<RunInfo | undefined>('quantilica.runFetcher', 'sleeper');
    await waitFor(() => api.notices.asked.length > asked, { what: 'the question before a second run', timeoutMs: 10_000 });
    assert.match(api.notices.asked.at(-1) ?? '', /sleeper is running now/);
    // The question shows a moment after it is recorded: dismiss it (Escape) until the command returns.
    let answered = false;
    void second.then(() => {
      answered = true;
    });
    await waitFor(
      async () => {
        await vscode.commands.executeCommand('workbench.action.closeQuickOpen');
        await new Promise((resolve) => setTimeout(resolve, 200));
        return answered;
      },
      { what: 'the question to be dismissed', timeoutMs: 15_000 },
    );
    assert.equal(await second, undefined, 'Escape starts nothing');
    const active = (await truth((c) => c.listRuns(50))).filter(
      (r) => r.fetcher === 'sleeper' && (r.status === 'running' || r.status === 'waiting'),
    );
    assert.deepEqual(
      active.map((r) => r.runId),
      [sleeper.runId],
    );
  });

  it('a cancelled run stays listed with its outcome; the Runs view lists a completed and a failed run with their icons, notifies the failure and opens its log', async () => {
    const sleeper = (await truth((c) => c.listRuns(50))).find((r) => r.fetcher === 'sleeper' && r.status === 'running');
    assert.ok(sleeper);
    await vscode.commands.executeCommand('quantilica.cancelRun', sleeper.runId);
    const cancelled = await waitFor(
      () => {
        const r = rowOf(sleeper.runId);
        return r && /cancelled/.test(String(r.item.description)) ? r : undefined;
      },
      { what: 'the cancelled run listed with its outcome', timeoutMs: 20_000 },
    );
    assert.equal(iconColour(cancelled.item), 'charts.orange');
    const fired: Array<string | undefined> = [];
    const sub = api.runs.onDidChangeTreeData((node) => fired.push(node?.id));
    const quick = await run('quick');
    const failer = await run('failer');
    const done = await waitFor(
      () => {
        const q = rowOf(quick.runId);
        const f = rowOf(failer.runId);
        return q && f && /completed/.test(String(q.item.description)) && /failed/.test(String(f.item.description)) ? { q, f } : undefined;
      },
      { what: 'the completed and the failed run in the Runs view', timeoutMs: 20_000 },
    );
    sub.dispose();
    assert.ok(
      fired.length > 0 && !fired.includes(undefined),
      `rows and the day refreshed, never the whole view (fired: ${fired.join(', ')})`,
    );
    assert.equal(iconColour(done.q.item), 'testing.iconPassed');
    assert.equal(iconColour(done.f.item), 'testing.iconFailed');
    assert.match(String(done.f.item.description), /exit 3/);
    assert.match(label(done.f.item), /^failer$/);
    await waitFor(
      () => api.notices.shown.find((n) => n.level === 'error' && /failer failed/.test(n.text) && n.actions.includes('Show Log')),
      { what: 'a notification for the failed run', timeoutMs: 10_000 },
    );
    // Newest first.
    const order = runRows().map((r) => (r.node.kind === 'run' ? r.node.runId : ''));
    assert.ok(order.indexOf(failer.runId) < order.indexOf(sleeper.runId), 'newest first');
    const days = api.runs.getChildren().map((d) => label(api.runs.getTreeItem(d)));
    assert.equal(days[0], 'Today');
    const editor = await vscode.commands.executeCommand<vscode.TextEditor>(
      done.f.item.command!.command,
      ...((done.f.item.command!.arguments ?? []) as unknown[]),
    );
    await waitFor(() => editor?.document.getText().includes('boom: the source answered 503'), {
      what: 'the failed run’s log',
      timeoutMs: 10_000,
    });
    await vscode.commands.executeCommand('quantilica.filterRuns', { status: 'failed', fetcher: 'failer' });
    const filtered = runRows();
    assert.ok(filtered.length >= 1 && filtered.every((r) => label(r.item) === 'failer' && /failed/.test(String(r.item.description))));
    await vscode.commands.executeCommand('quantilica.filterRuns', {});
    await vscode.commands.executeCommand('workbench.action.closeAllEditors');
    await requestScreenshot('runs');
  });

  it('the Station panel draws a lane per slot with the runs that happened, and the disk over time', async () => {
    const snapshot = await truth((c) => c.getSnapshot());
    const runs = (await truth((c) => c.listRuns(200))).filter((r) => r.startedAt !== null && r.slot !== null);
    await vscode.commands.executeCommand('quantilica.openStation');
    const drawn = await waitFor(
      () => {
        const r = api.station.lastRendered;
        return r && r.diskPoints >= 2 && r.bars >= runs.length ? r : undefined;
      },
      { what: 'the Station webview to draw the runs and disk samples', timeoutMs: 20_000, intervalMs: 100 },
    );
    assert.equal(drawn.canvases, 2, 'the timeline and the disk chart');
    const expected = snapshot.pools.flatMap((p) => Array.from({ length: p.size }, (_, i) => `${p.name} · slot ${i}`));
    assert.deepEqual(drawn.lanes.map((l) => l.lane).slice(0, expected.length), expected, 'one lane per slot');
    for (const run of runs) {
      const lane = drawn.lanes.find((l) => l.lane === `${run.pool} · slot ${run.slot}`);
      assert.ok(lane && lane.fetchers.split(',').includes(run.fetcher), `${run.fetcher} drawn in ${run.pool} slot ${run.slot}`);
    }
    assert.equal(
      drawn.lanes.reduce((n, l) => n + l.runs, 0),
      drawn.bars,
    );
    await requestScreenshot('station');
    await vscode.commands.executeCommand('workbench.action.closeAllEditors');
  });

  it('the gauge’s click opens a read-only view, and closing it asks nothing', async () => {
    await vscode.commands.executeCommand('workbench.action.closeAllEditors');
    await vscode.commands.executeCommand('quantilica.showDiskDetails');
    const tab = await waitFor(() => vscode.window.tabGroups.all.flatMap((g) => g.tabs).find((t) => /Disk gate/.test(t.label)), {
      what: 'the disk details tab',
      timeoutMs: 10_000,
    });
    assert.equal(tab.isDirty, false);
    assert.ok(!vscode.workspace.textDocuments.some((d) => d.isUntitled), 'no untitled document');
    const input = tab.input;
    const readOnly =
      input instanceof vscode.TabInputWebview
        ? /markdown/i.test(input.viewType)
        : input instanceof vscode.TabInputText && input.uri.scheme === 'quantilica-disk';
    assert.ok(readOnly, 'a Markdown preview or the read-only virtual document');
    const closed = await Promise.race([
      vscode.window.tabGroups.close(tab),
      new Promise<string>((resolve) => setTimeout(() => resolve('a dialog'), 5000)),
    ]);
    assert.equal(closed, true, 'closed without a question');
  });

  it('the Schedule view shows when each fetcher is due, pauses and resumes one fetcher', async () => {
    const node = await waitFor(() => api.schedule.getChildren().find((n) => n.fetcher === 'quick'), { what: 'quick in the Schedule view' });
    const i = api.schedule.getTreeItem(node);
    assert.match(String(i.description), /^in \d+ (h \d+ )?min · /);
    assert.match(text(i.tooltip), /America\/Sao_Paulo/);
    assert.equal(i.contextValue, 'schedule.active');
    await vscode.commands.executeCommand('quantilica.pauseSchedule', node);
    await waitFor(
      () =>
        api.schedule.getTreeItem(node).contextValue === 'schedule.paused' &&
        /^paused/.test(String(api.schedule.getTreeItem(node).description)),
      { what: 'quick shown paused', timeoutMs: 10_000 },
    );
    assert.equal((await truth((c) => c.getSnapshot())).schedule?.entries.find((e) => e.fetcher === 'quick')?.paused, true);
    assert.equal(
      (await truth((c) => c.getSnapshot())).schedule?.entries.find((e) => e.fetcher === 'sleeper')?.paused,
      false,
      'only that fetcher',
    );
    await requestScreenshot('schedule');
    await vscode.commands.executeCommand('quantilica.resumeSchedule', node);
    await waitFor(() => api.schedule.getTreeItem(node).contextValue === 'schedule.active', { what: 'quick resumed', timeoutMs: 10_000 });
    assert.equal((await truth((c) => c.getSnapshot())).schedule?.entries.find((e) => e.fetcher === 'quick')?.paused, false);
  });

  it('an expected disconnect writes no stack trace; with the agent down Run explains itself plainly; a log follow resumes after the agent is back', async () => {
    const printer = await run('printer');
    const editor = await waitFor(
      async () => vscode.commands.executeCommand<vscode.TextEditor | undefined>('quantilica.showRunLog', printer.runId),
      { what: 'the log to open', timeoutMs: 15_000, intervalMs: 300 },
    );
    const doc = editor.document;
    await waitFor(() => /printer line 2\n/.test(doc.getText()), { what: 'the follow to start', timeoutMs: 15_000 });
    const from = api.outputLines.length;
    // SIGKILL: the fetcher outlives the agent (as it does an agent restart) and the next agent adopts it.
    await stopAgent('SIGKILL');
    await waitFor(() => api.notices.shown.some((n) => /the agent stopped/.test(n.text)), { what: 'the "agent stopped" notification' });
    assert.equal(api.contextKeys.get('quantilica.agentState'), 'down', 'the when-clauses hide Run and Flush');
    const shown = api.notices.shown.length;
    assert.equal(await vscode.commands.executeCommand('quantilica.runFetcher', 'quick'), undefined);
    const message = api.notices.shown.slice(shown).find((n) => /agent/.test(n.text))?.text ?? '';
    assert.match(message, /reconnects by itself/);
    assert.doesNotMatch(message, /`/);
    assert.ok((message.match(/not running/g) ?? []).length <= 1);
    await startAgent();
    await waitFor(() => /printer line 40\n/.test(doc.getText()), {
      what: 'the follow to resume from its offset after the reconnect',
      timeoutMs: 40_000,
      intervalMs: 100,
    });
    assert.equal(doc.getText().match(/printer line 20\n/g)?.length, 1, 'resumed where it stopped: no line twice');
    await stopAgent('SIGTERM');
    await startAgent();
    const written = api.outputLines.slice(from).join('\n');
    assert.doesNotMatch(written, /\n\s+at \S+/, 'no stack trace in Output');
    assert.doesNotMatch(written, /\[error\]|Error: Connection is disposed/i);
  });

  it('flush without a database says why in the message itself, and the button is not offered', async () => {
    await stopAgent();
    await startAgent({ QUANTILICA_DATABASE_URL: '' });
    await waitFor(() => api.contextKeys.get('quantilica.hasDatabase') === false, { what: 'the hasDatabase context key to be false' });
    const shown = api.notices.shown.length;
    await vscode.commands.executeCommand('quantilica.flushTelemetry');
    const message = api.notices.shown
      .slice(shown)
      .map((n) => n.text)
      .join('\n');
    assert.match(message, /no database/);
    assert.match(message, /QUANTILICA_DATABASE_URL/);
  });
});
