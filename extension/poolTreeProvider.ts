import * as vscode from 'vscode';
import type { PoolState, RunInfo, Snapshot } from '../shared/protocol';
import type { StateEvent } from './agentSession';
import { durationWords, gbWords } from '../shared/humanWords';
import { describeWait, elapsed } from './describe';
import { isSyncNode, syncChildren, syncItem, type SyncNode } from './syncTreeItems';
import { escapeMd, isStarting, localTime, runIcon, runTooltip, spokenRun } from './runPresentation';

/** Elapsed times are shown to the second; only the rows that show one are refreshed this often. */
export const TICK_MS = 1000;

export type PoolNode = { kind: 'pool'; id: string; pool: string };
export type SlotNode = { kind: 'slot'; id: string; pool: string; index: number };
export type WaitingGroupNode = { kind: 'waiting'; id: string; pool: string };
export type WaitingRunNode = { kind: 'waitingRun'; id: string; pool: string; runId: string };
export type TreeNode = PoolNode | SlotNode | WaitingGroupNode | WaitingRunNode | SyncNode;

/**
 * Pools → slots, plus a "Waiting" group per pool that has waiting runs. Nodes are cached by id, so
 * the same object stands for the same pool, slot or run across changes and `onDidChangeTreeData`
 * can name exactly the node that changed; a whole-tree refresh happens only when the state is
 * replaced (connect, resynchronise, disconnect).
 */
export class PoolTreeProvider implements vscode.TreeDataProvider<TreeNode>, vscode.Disposable {
  private readonly emitter = new vscode.EventEmitter<TreeNode | undefined>();
  readonly onDidChangeTreeData = this.emitter.event;
  private readonly nodes = new Map<string, TreeNode>();
  private snapshot: Snapshot | null = null;
  /** Elapsed times of running slots go stale; only those nodes are refreshed, every second. */
  private readonly elapsedTimer = setInterval(() => this.refreshRunningSlots(), TICK_MS);
  /** The hibernation line counts down each second while a sync hibernates. */
  private readonly countdownTimer = setInterval(() => {
    if (this.snapshot?.sync?.hibernatingUntil) this.emitter.fire(this.node({ kind: 'syncHibernating', id: 'sync:hibernating', pool: '' }));
  }, TICK_MS);

  update(event: StateEvent): void {
    if (event.kind === 'reset') {
      this.snapshot = event.snapshot;
      this.nodes.clear();
      this.emitter.fire(undefined);
      return;
    }
    this.snapshot = event.after;
    // The first sync adds a root: the only change that redraws the whole tree.
    if (event.params.change.kind === 'sync' && !event.before.sync) {
      this.emitter.fire(undefined);
      return;
    }
    for (const node of changedNodes(event, (node) => this.node(node))) this.emitter.fire(node);
  }

  getTreeItem(node: TreeNode): vscode.TreeItem {
    const s = this.snapshot;
    if (isSyncNode(node)) return syncItem(s?.sync, node, s);
    const pool = s?.pools.find((p) => p.name === node.pool);
    switch (node.kind) {
      case 'pool':
        return poolItem(node, pool, s);
      case 'slot':
        return slotItem(node, pool, s);
      case 'waiting': {
        const waiting = waitingRuns(s, node.pool);
        const item = new vscode.TreeItem('Waiting', vscode.TreeItemCollapsibleState.Expanded);
        item.id = node.id;
        item.description = `${waiting.length}`;
        item.iconPath = new vscode.ThemeIcon('watch');
        item.contextValue = 'waitingGroup';
        return item;
      }
      case 'waitingRun': {
        const run = s?.runs.find((r) => r.runId === node.runId);
        const item = new vscode.TreeItem(run?.fetcher ?? node.runId, vscode.TreeItemCollapsibleState.None);
        item.id = node.id;
        item.description = run ? describeWait(run.wait, run) : '';
        item.tooltip = run ? runTooltip(run) : undefined;
        item.iconPath = run ? runIcon(run) : new vscode.ThemeIcon('clock');
        item.accessibilityInformation = { label: run ? spokenRun(run) : `run ${node.runId}, waiting` };
        item.contextValue = 'run.waiting';
        return item;
      }
    }
  }

  getChildren(node?: TreeNode): TreeNode[] {
    const s = this.snapshot;
    if (!s) return [];
    if (!node) {
      const roots: TreeNode[] = s.pools.map((p) => this.node({ kind: 'pool', id: `pool:${p.name}`, pool: p.name }));
      if (s.sync) roots.push(this.node({ kind: 'sync', id: 'sync', pool: '' }));
      return roots;
    }
    if (isSyncNode(node)) return s.sync ? syncChildren(s.sync, node).map((n) => this.node(n)) : [];
    if (node.kind === 'pool') {
      const pool = s.pools.find((p) => p.name === node.pool);
      if (!pool) return [];
      const slots: TreeNode[] = pool.slots.map((slot) =>
        this.node({ kind: 'slot', id: `slot:${pool.name}:${slot.index}`, pool: pool.name, index: slot.index }),
      );
      if (waitingRuns(s, pool.name).length > 0) slots.push(this.node({ kind: 'waiting', id: `waiting:${pool.name}`, pool: pool.name }));
      return slots;
    }
    if (node.kind === 'waiting') {
      return waitingRuns(s, node.pool).map((r) => this.node({ kind: 'waitingRun', id: `run:${r.runId}`, pool: node.pool, runId: r.runId }));
    }
    return [];
  }

  getParent(node: TreeNode): TreeNode | undefined {
    if (node.kind === 'pool' || node.kind === 'sync') return undefined;
    if (node.kind === 'syncMissed') return this.nodes.get(`sync:stage:${node.stage}`);
    if (isSyncNode(node)) return this.nodes.get('sync');
    if (node.kind === 'waitingRun') return this.nodes.get(`waiting:${node.pool}`);
    return this.nodes.get(`pool:${node.pool}`);
  }

  dispose(): void {
    clearInterval(this.elapsedTimer);
    clearInterval(this.countdownTimer);
    this.emitter.dispose();
  }

  /** The cached node with this id, so the tree sees one object per pool, slot and run. */
  private node<T extends TreeNode>(fresh: T): T {
    const cached = this.nodes.get(fresh.id);
    if (cached) return cached as T;
    this.nodes.set(fresh.id, fresh);
    return fresh;
  }

  private refreshRunningSlots(): void {
    for (const pool of this.snapshot?.pools ?? []) {
      for (const slot of pool.slots) {
        if (slot.holder)
          this.emitter.fire(this.node({ kind: 'slot', id: `slot:${pool.name}:${slot.index}`, pool: pool.name, index: slot.index }));
      }
    }
  }
}

/** The nodes whose rendering differs between `before` and `after`; the fewest that cover the change. */
function changedNodes(event: Extract<StateEvent, { kind: 'change' }>, node: <T extends TreeNode>(n: T) => T): TreeNode[] {
  const { before, after, params } = event;
  const change = params.change;
  const out: TreeNode[] = [];
  const poolNode = (name: string) => node({ kind: 'pool', id: `pool:${name}`, pool: name });
  const slotNode = (pool: string, index: number) => node({ kind: 'slot', id: `slot:${pool}:${index}`, pool, index });
  if (change.kind === 'pool') {
    const old = before.pools.find((p) => p.name === change.pool.name);
    // A new pool, another slot count or another summary line: the pool and its children.
    if (!old || old.slots.length !== change.pool.slots.length || summary(old) !== summary(change.pool)) return [poolNode(change.pool.name)];
    change.pool.slots.forEach((slot, i) => {
      if (JSON.stringify(slot) !== JSON.stringify(old.slots[i])) out.push(slotNode(change.pool.name, slot.index));
    });
    return out;
  }
  if (change.kind === 'run') {
    const run = change.run;
    const wasWaiting = before.runs.some((r) => r.runId === run.runId && r.status === 'waiting');
    if (run.status === 'waiting' || wasWaiting) {
      const hadWaiting = waitingRuns(before, run.pool).length;
      const hasWaiting = waitingRuns(after, run.pool).length;
      // The count shows on the pool line: a new or finished wait refreshes the pool (and the group
      // with it); a wait whose reason changed refreshes only its own line.
      if (hadWaiting !== hasWaiting) return [poolNode(run.pool)];
      out.push(node({ kind: 'waitingRun', id: `run:${run.runId}`, pool: run.pool, runId: run.runId }));
    }
    const pool = after.pools.find((p) => p.name === run.pool);
    const slot = pool?.slots.find((sl) => sl.holder?.runId === run.runId);
    if (pool && slot) out.push(slotNode(pool.name, slot.index));
    return out;
  }
  if (change.kind === 'sync') {
    // A new sync appears at the root; otherwise its group (stages, hibernation line) is redrawn.
    return before.sync ? [node({ kind: 'sync', id: 'sync', pool: '' })] : [];
  }
  if (change.kind === 'disk' && before.disk?.state !== change.disk.state) {
    // The gate's state shows on every pool line; it changes rarely (not on each disk poll).
    return after.pools.map((p) => poolNode(p.name));
  }
  return out;
}

function summary(pool: PoolState): string {
  return `${pool.used}/${pool.size}/${pool.waiting}`;
}

function waitingRuns(s: Snapshot | null, pool: string): RunInfo[] {
  // A starting run already shows in its slot; until the pool's state lists it there, it stays here.
  const inSlot = new Set((s?.pools.find((p) => p.name === pool)?.slots ?? []).map((sl) => sl.holder?.runId).filter((id) => id));
  return (s?.runs ?? [])
    .filter((r) => r.pool === pool && r.status === 'waiting' && !(isStarting(r) && inSlot.has(r.runId)))
    .sort((a, b) => a.enqueuedAt.localeCompare(b.enqueuedAt));
}

function poolItem(node: PoolNode, pool: PoolState | undefined, s: Snapshot | null): vscode.TreeItem {
  const item = new vscode.TreeItem(node.pool, vscode.TreeItemCollapsibleState.Expanded);
  item.id = node.id;
  item.iconPath = new vscode.ThemeIcon('server-process');
  item.contextValue = 'pool';
  if (!pool) return item;
  const gate = s?.disk?.state ?? 'unknown';
  // Counted from the runs, which change with every enqueue, rather than the pool record's count.
  const waiting = waitingRuns(s, pool.name).length;
  item.description = `${pool.used}/${pool.size} slots · ${waiting} waiting · disk ${gate}${poolMemoryText(pool)}`;
  item.tooltip = `${pool.name}: ${pool.used} of ${pool.size} slots in use, ${waiting} waiting (a run waits at most ${durationWords(pool.waitTimeoutSeconds)}); disk gate ${gate}${poolMemoryText(pool, s)}`;
  item.accessibilityInformation = {
    label: `pool ${pool.name}: ${pool.used} of ${pool.size} slots in use, ${waiting} waiting, disk gate ${gate}`,
  };
  return item;
}

function slotItem(node: SlotNode, pool: PoolState | undefined, s: Snapshot | null): vscode.TreeItem {
  const slot = pool?.slots.find((sl) => sl.index === node.index);
  const item = new vscode.TreeItem(`slot ${node.index}`, vscode.TreeItemCollapsibleState.None);
  item.id = node.id;
  const holder = slot?.holder ?? null;
  if (!holder) {
    item.description = 'free';
    item.iconPath = new vscode.ThemeIcon('circle-outline');
    item.accessibilityInformation = { label: `slot ${node.index} of ${node.pool}, free` };
    item.contextValue = 'slot.free';
    return item;
  }
  const run = holder.runId ? s?.runs.find((r) => r.runId === holder.runId) : undefined;
  const since = run?.startedAt ?? holder.since;
  // The fetcher leads (it is what an operator looks for); slot and time follow, ids sit in the tooltip.
  item.label = holder.fetcher ?? (holder.foreign ? 'another process' : 'unknown fetcher');
  // With the postgres slot backend a slot may be held by another station.
  const station = holder.station !== undefined && holder.foreign ? `on ${holder.station}` : null;
  item.description = [`slot ${node.index}`, station, since ? elapsed(since) : null, runMemoryText(run)]
    .filter((p) => p !== null)
    .join(' · ');
  const tooltip = run ? runTooltip(run) : new vscode.MarkdownString(undefined, true);
  if (!run)
    tooltip.appendMarkdown(
      `**${escapeMd(String(item.label))}** — ${holder.foreign ? 'a process outside this agent holds the slot' : 'running'}\n\nSince: ${escapeMd(localTime(since))}  \nProcess: pid ${holder.pid}`,
    );
  if (holder.station !== undefined) tooltip.appendMarkdown(`  \nStation: ${escapeMd(holder.station)}`);
  tooltip.appendMarkdown(`  \nLock: ${escapeMd(slot?.lockPath ?? '')}`);
  item.tooltip = tooltip;
  item.iconPath = holder.foreign
    ? new vscode.ThemeIcon('lock', new vscode.ThemeColor('charts.yellow'))
    : run
      ? runIcon(run)
      : new vscode.ThemeIcon('sync~spin', new vscode.ThemeColor('charts.blue'));
  item.accessibilityInformation = {
    label: run
      ? `slot ${node.index} of ${node.pool}: ${spokenRun(run)}`
      : `slot ${node.index} of ${node.pool}: held by ${String(item.label)}, process ${holder.pid}`,
  };
  // Only the agent's own runs can be cancelled from here; a foreign holder is shown, not touched.
  item.contextValue = holder.foreign || !holder.runId ? 'slot.foreign' : 'run.running';
  if (holder.runId && !holder.foreign)
    item.command = { command: 'quantilica.showRunLog', title: 'Show Run Log', arguments: [holder.runId] };
  return item;
}

// memory ceilings
/** A pool's memory use against its ceiling; with the snapshot (tooltip), why it is not enforced. */
function poolMemoryText(pool: PoolState, s?: Snapshot | null): string {
  const m = pool.memory;
  if (!m) return '';
  const used = m.usedMb === null ? '?' : gbWords(m.usedMb / 1024).replace(' GB', '');
  const enforced = m.enforcement === 'not-enforced' ? ` NOT ENFORCED${s?.agent.memory?.reason ? ` (${s.agent.memory.reason})` : ''}` : '';
  return ` · mem ${used} of ${gbWords(m.ceilingMb / 1024)}${enforced}`;
}

/** A running run's memory against its ceiling. */
function runMemoryText(run: RunInfo | undefined): string | null {
  if (!run || run.memoryMb === undefined || run.memoryMb === null) return null;
  const used = gbWords(run.memoryMb / 1024);
  return `${run.memoryLimitMb ? `${used.replace(' GB', '')} of ${gbWords(run.memoryLimitMb / 1024)}` : used}${run.memorySource === 'sampled' ? ' (sampled)' : ''}`;
}
