// In a real extension host: a GitHub sync, run from the Run command by a real agent against
// the GitHub API simulator (a process of its own), hibernates on its graphql budget and the pools
// tree shows it: the "GitHub sync" group, "hibernating until HH:MM, in … (graphql budget)", the stages.
import * as assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as readline from 'node:readline';
import * as vscode from 'vscode';
import { connectAgent } from '../../../agent/client/agentClient';
import type { RunInfo, Snapshot } from '../../../shared/protocol';
import type { QuantilicaApi } from '../../../extension/extension';
import type { TreeNode } from '../../../extension/poolTreeProvider';
import { waitFor } from '../../support/waitFor';
import { AgentProcesses } from './agentProcesses';

const EXTENSION_ID = 'quantilica.quantilica-orchestrator';
const home = process.env.HOME ?? '';
const connectionFile = path.join(home, '.quantilica', 'agent.json');
const repo = path.resolve(__dirname, '..', '..', '..', '..');
const node = process.env.QUANTILICA_TEST_NODE ?? 'node';
const agents = new AgentProcesses(path.join(repo, 'dist', 'agent.js'), node, path.join(home, 'agent-logs'));
const WINDOW_S = 600;

let api: QuantilicaApi;
let simulator: ChildProcess | null = null;
let simulatorUrl = '';

/**
 * The simulator with 2 GraphQL points per 10-minute window, its clock set 1 s into a fresh window:
 * the first GraphQL page leaves 1 point, under 2 x cost, so the sync hibernates until that window's
 * reset, about 10 minutes on, whatever the time of day. Core keeps GitHub's 5,000: were it as short,
 * the REST stage would be held back too, for the same reset, and the sync would name whichever budget
 * the clock read of its answers put a few milliseconds earlier.
 */
async function startSimulator(): Promise<string> {
  const windowMs = WINDOW_S * 1000;
  const offset = windowMs - (Date.now() % windowMs) + 1000;
  const child = spawn(
    node,
    [
      path.join(repo, 'dist', 'githubSimulator.js'),
      '--port',
      '0',
      '--repos',
      '3',
      '--limit',
      '2',
      '--core-limit',
      '5000',
      '--window',
      String(WINDOW_S),
      '--clock-offset',
      String(offset),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  simulator = child;
  const line = await new Promise<string>((resolve, reject) => {
    readline.createInterface({ input: child.stdout }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`the simulator exited with ${code}`)));
  });
  return (JSON.parse(line) as { url: string }).url;
}

function writeCatalog(): string {
  const dir = path.join(home, 'github-catalog');
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const file = path.join(dir, 'catalog.json');
  fs.writeFileSync(
    file,
    JSON.stringify({
      fetchers: [
        {
          name: 'github',
          kind: 'github-sync',
          pool: 'network-light',
          repos: ['sim-org/repo-001', 'sim-org/repo-002', 'sim-org/repo-003'],
          concurrency: 2,
        },
      ],
    }),
    { mode: 0o600 },
  );
  return file;
}

function label(item: vscode.TreeItem): string {
  return typeof item.label === 'string' ? item.label : (item.label?.label ?? '');
}

function syncGroup(): TreeNode | undefined {
  return api.tree.getChildren().find((n) => label(api.tree.getTreeItem(n)) === 'GitHub sync');
}

async function agentSnapshot(): Promise<Snapshot> {
  const client = await connectAgent(connectionFile, { client: 'github-suite' });
  try {
    return await client.getSnapshot();
  } finally {
    await client.close();
  }
}

describe('A GitHub sync in the tree', () => {
  let agentPid = 0;
  let runId = '';

  before(async () => {
    const extension = vscode.extensions.getExtension<QuantilicaApi>(EXTENSION_ID);
    assert.ok(extension);
    api = await extension.activate();
    await waitFor(() => api.session.state.kind !== 'connected', { what: 'no agent from an earlier suite', timeoutMs: 30_000 });
    const url = await startSimulator();
    simulatorUrl = url;
    // The sync in a SQLite file of this suite's home, not the PostgreSQL all suites share: a later
    // suite's agent (the demo catalog has a github entry) would otherwise show this sync in its tree.
    agentPid =
      (await agents.start({ QUANTILICA_CATALOG: writeCatalog(), QUANTILICA_GITHUB_API_URL: url, QUANTILICA_DATABASE_URL: '' })).pid ?? 0;
    await waitFor(() => api.session.state.kind === 'connected' && api.session.state.info.pid === agentPid, {
      what: 'the extension to connect to the new agent',
      timeoutMs: 20_000,
    });
    await vscode.commands.executeCommand('workbench.view.extension.quantilica');
  });

  after(async () => {
    if (runId !== '') {
      const client = await connectAgent(connectionFile, { client: 'github-suite' }).catch(() => null);
      await client?.cancel({ runId }).catch(() => undefined);
      await client?.close();
    }
    await agents.stopAll();
    simulator?.kill('SIGTERM');
  });

  it('the Run command offers the sync; the tree shows it hibernating until HH:MM on its graphql budget, counting down, with its stages', async () => {
    const run = await vscode.commands.executeCommand<RunInfo | undefined>('quantilica.runFetcher', 'github');
    assert.ok(run, 'the sync was queued');
    runId = run.runId;
    const line = await waitFor(
      () => {
        const group = syncGroup();
        const first = group && api.tree.getChildren(group)[0];
        const item = first && api.tree.getTreeItem(first);
        return item && label(item).startsWith('hibernating until') ? item : undefined;
      },
      { what: 'the hibernation line in the GitHub sync group', timeoutMs: 60_000, intervalMs: 100 },
    );
    const truth = (await agentSnapshot()).sync;
    assert.ok(truth?.hibernatingUntil, 'the agent reports the sync hibernating');
    assert.equal(truth.runId, run.runId);
    assert.equal(truth.budget, 'graphql');
    const until = new Date(truth.hibernatingUntil);
    const hhmm = until.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
    assert.match(label(line), new RegExp(`^hibernating until ${hhmm}, in \\d+ min \\d+ s$`));
    assert.equal(line.description, '(graphql budget)');
    assert.ok(until.getTime() > Date.now() + 60_000, "the wake-up is the window's reset, minutes away");

    const group = syncGroup()!;
    const groupItem = api.tree.getTreeItem(group);
    assert.match(String(groupItem.description), /^github · hibernating · \d+ records? · \d+ requests?$/);
    const stages = api.tree
      .getChildren(group)
      .slice(1)
      .map((n) => api.tree.getTreeItem(n));
    assert.deepEqual(stages.map(label), ['changes', 'checks']);
    for (const s of stages) assert.match(String(s.description), /^\d+\/3 done$/);
    // The countdown moves by itself (a refresh of the line each second), the wake-up time does not.
    const before = label(line);
    await waitFor(
      () => {
        const first = api.tree.getChildren(syncGroup())[0];
        const now = label(api.tree.getTreeItem(first));
        return now !== before && now.startsWith(`hibernating until ${hhmm}, in `) ? now : undefined;
      },
      { what: 'the countdown to tick', timeoutMs: 5_000, intervalMs: 100 },
    );
    // Hibernating, the sync holds no slot: the network-light pool shows none used by it.
    const pool = (await agentSnapshot()).pools.find((p) => p.name === 'network-light')!;
    assert.ok(
      pool.slots.every((s) => s.holder?.runId !== run.runId),
      'no slot held while hibernating',
    );
  });

  it('the sync writes its progress into its run’s log: the stages, the repositories, the hibernation with its budget and wake-up time', async () => {
    const truth = (await agentSnapshot()).sync;
    assert.ok(truth?.hibernatingUntil);
    const editor = await vscode.commands.executeCommand<vscode.TextEditor | undefined>('quantilica.showRunLog', runId);
    assert.ok(editor, 'a hibernating sync has a log to show');
    const text = await waitFor(
      () => /hibernating: the graphql budget is spent/.test(editor.document.getText()) && editor.document.getText(),
      { what: 'the hibernation in the log', timeoutMs: 10_000 },
    );
    assert.match(text, /\[quantilica [^\]]+\] GitHub sync started: holds network-light slot \d+ while it works\./);
    assert.match(text, /stage changes: \d+ of 3 repositories done, \d+ not reached, \d+ not yet reached\./);
    assert.match(text, /stage checks: \d+ of 3 repositories done/);
    assert.match(text, /\d+ requests? made/);
    assert.ok(text.includes(`wakes at ${truth.hibernatingUntil}`), `the wake-up time in the log:\n${text}`);
    await vscode.commands.executeCommand('workbench.action.closeAllEditors');
  });

  it('sync rows are read in plain words with local times, and after an agent restart the group still names its entry, not "cli"', async () => {
    const spoken = (n: TreeNode) => api.tree.getTreeItem(n).accessibilityInformation?.label ?? '';
    const group = syncGroup()!;
    for (const node of [group, ...api.tree.getChildren(group)]) {
      const text = spoken(node);
      assert.ok(text.length > 0, `${label(api.tree.getTreeItem(node))} has an accessible label`);
      assert.doesNotMatch(text, /\d{4}-\d{2}-\d{2}T\d{2}:/, `no ISO timestamps: ${text}`);
      assert.doesNotMatch(text, /\*\*|\$\(|`/, `plain text: ${text}`);
    }
    assert.match(spoken(group), /^GitHub sync github, hibernating, started .+, \d+ records?, \d+ requests?, \d+ hibernations?/);
    assert.match(spoken(api.tree.getChildren(group)[0]), /^hibernating until .+, waiting for the graphql budget; no slot held$/);

    // The agent restarts; the new one finds the sync in its store and adopts the hibernating run.
    const env = { QUANTILICA_CATALOG: writeCatalog(), QUANTILICA_GITHUB_API_URL: simulatorUrl, QUANTILICA_DATABASE_URL: '' };
    await agents.stop(agentPid);
    await waitFor(() => api.session.state.kind !== 'connected', { what: 'the session to see the agent go', timeoutMs: 15_000 });
    agentPid = (await agents.start(env)).pid ?? 0;
    await waitFor(() => api.session.state.kind === 'connected' && api.session.state.info.pid === agentPid, {
      what: 'the extension to connect to the new agent',
      timeoutMs: 20_000,
    });
    const item = await waitFor(
      () => {
        const g = syncGroup();
        const i = g && api.tree.getTreeItem(g);
        return i && /hibernating/.test(String(i.description)) ? i : undefined;
      },
      { what: 'the sync group after the restart', timeoutMs: 20_000 },
    );
    assert.match(
      String(item.description),
      /^github · hibernating · /,
      `named after its entry after a restart: ${String(item.description)}`,
    );

    // The Station panel draws the sync's slot use: working with a slot, hibernating without.
    await vscode.commands.executeCommand('quantilica.openStation');
    const drawn = await waitFor(
      () => {
        const r = api.station.lastRendered;
        return r && r.down === null && r.sync.spans > 0 ? r : undefined;
      },
      { what: 'the sync lane in the Station panel', timeoutMs: 20_000 },
    );
    assert.equal(drawn.sync.hibernating, true, 'the hibernation drawn as time without a slot');
    await vscode.commands.executeCommand('workbench.action.closeAllEditors');
  });
});
