// The extension in a real VS Code extension host against real agents (real processes, the real
// WebSocket protocol, a real PostgreSQL for the flush). runOffline.mjs (code-server + Chromium) or
// runElectron.mjs (test-electron) provides the host and the environment.
import * as assert from 'node:assert/strict';
import * as path from 'node:path';
import pg from 'pg';
import * as vscode from 'vscode';
import { connectAgent, type AgentClient } from '../../../agent/client/agentClient';
import type { Snapshot } from '../../../shared/protocol';
import type { QuantilicaApi } from '../../../extension/extension';
import type { TreeNode } from '../../../extension/poolTreeProvider';
import { waitFor } from '../../support/waitFor';
import { AgentProcesses } from './agentProcesses';
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

interface Rendered {
  id: string;
  label: string;
  description: string;
  contextValue: string;
  runId: string | null;
  node: TreeNode;
  children: Rendered[];
}

let api: QuantilicaApi;
let agentPid = 0;

function render(node?: TreeNode): Rendered[] {
  return api.tree.getChildren(node).map((child) => {
    const item = api.tree.getTreeItem(child);
    const label = typeof item.label === 'string' ? item.label : (item.label?.label ?? '');
    const runId =
      child.kind === 'slot'
        ? (api.session.snapshot?.pools.find((p) => p.name === child.pool)?.slots.find((s) => s.index === child.index)?.holder?.runId ??
          null)
        : child.kind === 'waitingRun'
          ? child.runId
          : null;
    return {
      id: item.id ?? '',
      label,
      description: String(item.description ?? ''),
      contextValue: item.contextValue ?? '',
      runId,
      node: child,
      children: render(child),
    };
  });
}

async function truth<T>(read: (client: AgentClient) => T | Promise<T>): Promise<T> {
  const client = await connectAgent(connectionFile, { client: 'extension-suite' });
  try {
    return await read(client);
  } finally {
    await client.close();
  }
}

async function agentSnapshot(): Promise<Snapshot> {
  return truth((c) => c.getSnapshot());
}

function connectedPid(): number | null {
  const state = api.session.state;
  return state.kind === 'connected' ? state.info.pid : null;
}

describe('Quantilica extension', () => {
  before(async () => {
    const extension = vscode.extensions.getExtension<QuantilicaApi>(EXTENSION_ID);
    assert.ok(extension, `${EXTENSION_ID} is installed in the extension host`);
    api = await extension.activate();
    assert.ok(api, 'activate returned the API (activation did not fail)');
    // The benchmark figure for the extension's activation (bench/protocol.ts cannot host VS Code).
    console.log(`      activation took ${api.activationMs} ms`);
  });

  after(async () => {
    await agents.stopAll();
    if (agentPid > 0) await agents.stop(agentPid);
  });

  it('activates with no agent, says so, and keeps every command registered', async () => {
    await waitFor(() => api.session.state.kind === 'down', { what: 'the session to report the agent down' });
    assert.match(api.disk.view.text, /agent down/);
    assert.deepEqual(render(), [], 'an empty tree lets the welcome view with "Start agent" show');
    const commands = await vscode.commands.getCommands(true);
    for (const id of ['runFetcher', 'cancelRun', 'flushTelemetry', 'showRunLog', 'startAgent', 'restartAgent', 'showOutput']) {
      assert.ok(commands.includes(`quantilica.${id}`), `quantilica.${id} is registered`);
    }
    assert.equal(
      await vscode.commands.executeCommand('quantilica.runFetcher', 'comex'),
      undefined,
      'a command that needs the agent explains instead of failing',
    );
  });

  it('"Start agent" starts the bundled agent and connects', async () => {
    const pid = await vscode.commands.executeCommand<number | undefined>('quantilica.startAgent');
    assert.ok(pid && pid > 0, 'the command resolved with the new agent pid');
    agentPid = pid;
    assert.equal(connectedPid(), pid);
    await vscode.commands.executeCommand('workbench.view.extension.quantilica');
  });

  it("shows the agent's pools and slots", async () => {
    const snapshot = await agentSnapshot();
    await waitFor(() => render().length === snapshot.pools.length, { what: 'the tree to show every pool' });
    const tree = render();
    assert.deepEqual(
      tree.map((p) => p.label),
      snapshot.pools.map((p) => p.name),
    );
    for (const pool of snapshot.pools) {
      const node = tree.find((p) => p.label === pool.name)!;
      const waiting = snapshot.runs.filter((r) => r.pool === pool.name && r.status === 'waiting').length;
      assert.match(node.description, new RegExp(`^${pool.used}/${pool.size} slots · ${waiting} waiting · disk `));
      assert.deepEqual(
        node.children.map((s) => s.label),
        pool.slots.map((s) => s.holder?.fetcher ?? `slot ${s.index}`),
      );
      assert.deepEqual(
        node.children.map((s) => s.id),
        pool.slots.map((s) => `slot:${pool.name}:${s.index}`),
        'stable ids',
      );
    }
  });

  it('"Run fetcher" puts a run in a slot and the tree shows it; Cancel ends it', async () => {
    const run = await vscode.commands.executeCommand<{ runId: string; pool: string } | undefined>('quantilica.runFetcher', 'comex');
    assert.ok(run, 'the command resolved with the run');
    const slot = await waitFor(
      () =>
        render()
          .find((p) => p.label === run.pool)
          ?.children.find((s) => s.runId === run.runId),
      { what: `run ${run.runId} in a slot of the tree`, timeoutMs: 15_000 },
    );
    assert.equal(slot.label, 'comex', 'the row leads with the fetcher');
    assert.match(slot.description, /^slot \d+ · \d+ seconds?( · (under )?[\d.]+( of [\d.]+)? GB( \(sampled\))?)?$/);
    assert.equal(slot.contextValue, 'run.running', 'the inline Cancel and "Show run log" menus apply');
    const held = (await agentSnapshot()).pools.find((p) => p.name === run.pool)?.slots.find((s) => s.holder?.runId === run.runId);
    assert.ok(held, 'the agent reports the same run holding a slot');
    assert.equal(slot.id, `slot:${run.pool}:${held.index}`);
    await waitFor(
      () =>
        render()
          .find((p) => p.label === run.pool)
          ?.description.startsWith('1/'),
      { what: 'the pool line to count the held slot' },
    );
    await requestScreenshot('workbench');

    const log = await vscode.commands.executeCommand<vscode.TextEditor | undefined>('quantilica.showRunLog', slot.node);
    await waitFor(() => log?.document.getText().includes('demo fetcher comex'), { what: 'the run log to show the fetcher output' });

    const cancelled = await vscode.commands.executeCommand<Array<{ runId: string }>>('quantilica.cancelRun', slot.node);
    assert.deepEqual(
      cancelled?.map((r) => r.runId),
      [run.runId],
    );
    await waitFor(
      () =>
        render()
          .find((p) => p.label === run.pool)
          ?.children.every((s) => s.runId !== run.runId),
      { what: 'the slot to be freed in the tree', timeoutMs: 15_000 },
    );
    const after = await truth((c) => c.listRuns(20));
    assert.equal(after.find((r) => r.runId === run.runId)?.status, 'cancelled');
  });

  it('shows why a run waits and cancels it from the Waiting group', async () => {
    const pool = (await agentSnapshot()).pools.find((p) => p.name === 'cpu-analysis')!;
    const runs: Array<{ runId: string }> = [];
    for (const fetcher of ['cvm', 'inep', 'bcb-microdados'].slice(0, pool.size + 1)) {
      runs.push(await vscode.commands.executeCommand<{ runId: string }>('quantilica.runFetcher', fetcher));
    }
    // Every run passes through "waiting" on its way to a slot; the state to wait for is the settled
    // one: the pool full and one run left waiting, with the reason the agent gives.
    const waiting = await waitFor(
      () => {
        const pool = render().find((p) => p.label === 'cpu-analysis');
        const group = pool?.children.find((c) => c.label === 'Waiting');
        const settled =
          pool?.description.startsWith('2/2 slots · 1 waiting') &&
          group?.children.length === 1 &&
          group.children[0]?.description === 'waiting for a slot (position 1)';
        return settled ? group : undefined;
      },
      { what: 'the full pool with one run waiting, and why', timeoutMs: 15_000 },
    );
    const [entry] = waiting.children;
    assert.equal(entry?.contextValue, 'run.waiting');
    await vscode.commands.executeCommand('quantilica.cancelRun', entry?.node);
    await waitFor(
      () =>
        !render()
          .find((p) => p.label === 'cpu-analysis')
          ?.children.some((c) => c.label === 'Waiting'),
      { what: 'the Waiting group to go', timeoutMs: 15_000 },
    );
    for (const run of runs) await truth((c) => c.cancel({ runId: run.runId }).catch(() => []));
  });

  it('"Flush telemetry" reports progress and empties the spool into PostgreSQL', async () => {
    const url = process.env.QUANTILICA_DATABASE_URL;
    assert.ok(url, 'runOffline passes a real PostgreSQL');
    // Events spooled by another process: the agent's automatic flush may or may not have sent them
    // by the time the command runs; either way the command must end with all of them in PostgreSQL.
    const emitted = [agents.emitEvent('flush-test-a'), agents.emitEvent('flush-test-b')];
    const result = await vscode.commands.executeCommand<{
      sent: number;
      remaining: number;
      error: string | null;
      progress: Array<{ kind: string; sent: number; remaining: number }>;
    }>('quantilica.flushTelemetry');
    assert.ok(result, 'the flush ran');
    assert.equal(result.error, null);
    assert.equal(result.remaining, 0);
    assert.deepEqual([result.progress[0]?.kind, result.progress.at(-1)?.kind], ['begin', 'end']);
    assert.equal(result.progress.at(-1)?.sent, result.sent);
    assert.equal((await agentSnapshot()).spool?.pending, 0);
    const db = new pg.Client({ connectionString: url });
    await db.connect();
    try {
      const rows = await db.query<{ run_id: string }>('SELECT run_id FROM core.task_run_log WHERE run_id = ANY($1)', [emitted]);
      assert.deepEqual(rows.rows.map((r) => r.run_id).sort(), [...emitted].sort(), 'the spooled events arrived in PostgreSQL');
    } finally {
      await db.end();
    }
  });

  it('the status bar follows the disk gate: paused (error), warn (warning), ok', async () => {
    const states = [
      {
        env: { CRON_DISK_PAUSE_GB: '100000', CRON_DISK_WARN_GB: '100001', CRON_DISK_RESUME_GB: '100002' },
        state: 'paused',
        background: 'statusBarItem.errorBackground',
      },
      {
        env: { CRON_DISK_PAUSE_GB: '0', CRON_DISK_WARN_GB: '100000', CRON_DISK_RESUME_GB: '100000' },
        state: 'warn',
        background: 'statusBarItem.warningBackground',
      },
      { env: { CRON_DISK_PAUSE_GB: '0', CRON_DISK_WARN_GB: '0.001', CRON_DISK_RESUME_GB: '0.001' }, state: 'ok', background: undefined },
    ];
    for (const step of states) {
      await agents.stop(agentPid);
      await waitFor(() => api.session.state.kind === 'down', { what: 'the session to see the agent go' });
      agentPid = (await agents.start({ ...step.env, CRON_DISK_POLL_SECONDS: '0.2' })).pid ?? 0;
      await waitFor(() => connectedPid() === agentPid && api.disk.view.text.endsWith(`· ${step.state}`), {
        what: `the gauge to show ${step.state}`,
        timeoutMs: 20_000,
      });
      assert.match(api.disk.view.text, /\d+(\.\d+)? GB free · /);
      assert.equal(api.disk.view.background, step.background);
      assert.match(api.disk.view.tooltip, /pause below \| \d+/);
    }
  });

  it('reconnects after the agent is killed and restarted', async () => {
    await agents.stop(agentPid, 'SIGKILL');
    await waitFor(() => api.session.state.kind === 'down', { what: 'the session to notice the killed agent' });
    assert.deepEqual(render(), []);
    agentPid = (await agents.start()).pid ?? 0;
    await waitFor(() => connectedPid() === agentPid, { what: 'the session to reconnect to the new agent', timeoutMs: 20_000 });
    const snapshot = await agentSnapshot();
    await waitFor(() => render().length === snapshot.pools.length, { what: 'the tree to come back' });
    // The new agent keeps publishing (disk polls, memory figures): the session must reach the version
    // the agent had when asked, through the ordered change events, never stay behind on the old agent's.
    const agentVersion = (await agentSnapshot()).version;
    await waitFor(() => (api.session.snapshot?.version ?? -1) >= agentVersion, {
      what: 'the session to resynchronise to the new agent',
      timeoutMs: 10_000,
    });
    assert.equal(api.session.snapshot?.agent.pid, agentPid, 'resynchronised to the new agent');
  });
});
