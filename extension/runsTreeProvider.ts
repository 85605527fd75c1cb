import * as vscode from 'vscode';
import { plural, triggerWords } from '../shared/humanWords';
import { ListRuns, type RunInfo, type RunStatus } from '../shared/protocol';
import type { AgentSession, StateEvent } from './agentSession';
import { TICK_MS } from './poolTreeProvider';
import { duration, outcome, peakMemory, runIcon, runTooltip, spokenRun } from './runPresentation';
import { sendRequest } from './protocolCalls';

export type DayNode = { kind: 'day'; id: string; day: string };
export type RunNode = { kind: 'run'; id: string; runId: string };
export type RunsNode = DayNode | RunNode;

export interface RunsFilter {
  fetcher?: string;
  status?: RunStatus;
}

/** The most runs the view keeps (newest first); older ones are in `quantilica runs`. */
const MAX_RUNS = 300;

/**
 * The Runs view: recent runs, newest first, grouped by day. It loads the agent's history once per
 * connection (`quantilica/runs`) and then follows the change events, refreshing only the row of the
 * run that changed (or its day, when the run is new to it). Runs stay listed when the agent goes
 * away: history does not vanish with a connection.
 */
export class RunsTreeProvider implements vscode.TreeDataProvider<RunsNode>, vscode.Disposable {
  private readonly emitter = new vscode.EventEmitter<RunsNode | undefined>();
  readonly onDidChangeTreeData = this.emitter.event;
  private readonly runs = new Map<string, RunInfo>();
  private readonly nodes = new Map<string, RunsNode>();
  private filter: RunsFilter = {};
  private readonly ticker = setInterval(() => this.tick(), TICK_MS);
  /** Fires when a filter changes: the view's description names it. */
  readonly onDidChangeFilter: vscode.Event<RunsFilter>;
  private readonly filterEmitter = new vscode.EventEmitter<RunsFilter>();

  constructor(
    private readonly session: AgentSession,
    private readonly log: vscode.LogOutputChannel,
  ) {
    this.onDidChangeFilter = this.filterEmitter.event;
  }

  /** True when a filter is set, runs are known, and none of them matches it. */
  get filterMatchesNothing(): boolean {
    return (this.filter.fetcher !== undefined || this.filter.status !== undefined) && this.runs.size > 0 && this.visibleRuns().length === 0;
  }

  get currentFilter(): RunsFilter {
    return this.filter;
  }

  setFilter(filter: RunsFilter): void {
    this.filter = { ...filter };
    this.filterEmitter.fire(this.filter);
    this.emitter.fire(undefined);
  }

  /** Every run the view knows, newest first (the palette's pickers list them). */
  allRuns(): RunInfo[] {
    return [...this.runs.values()].sort((a, b) => sortKey(b).localeCompare(sortKey(a)));
  }

  run(runId: string): RunInfo | undefined {
    return this.runs.get(runId);
  }

  update(event: StateEvent): void {
    if (event.kind === 'reset') {
      if (event.snapshot) {
        for (const run of event.snapshot.runs) this.runs.set(run.runId, run);
        this.trim();
        this.emitter.fire(undefined);
        // The reset comes just before the session says "connected": ask for the history then.
        this.session.whenConnected(30_000).then(
          () => this.load(),
          () => undefined,
        );
      }
      return;
    }
    if (event.params.change.kind !== 'run') return;
    const run = event.params.change.run;
    const known = this.runs.get(run.runId);
    this.runs.set(run.runId, run);
    this.trim();
    if (!this.visible(run) && (!known || !this.visible(known))) return;
    if (known && dayOf(known) === dayOf(run) && this.visible(known) === this.visible(run))
      this.emitter.fire(this.node({ kind: 'run', id: `run:${run.runId}`, runId: run.runId }));
    // A run new to its day refreshes that day's group; a day new to the view, the root.
    else if (!known && this.nodes.has(`day:${dayOf(run)}`)) this.emitter.fire(this.nodes.get(`day:${dayOf(run)}`));
    else this.emitter.fire(undefined);
  }

  getTreeItem(node: RunsNode): vscode.TreeItem {
    if (node.kind === 'day') {
      const count = this.visibleRuns().filter((r) => dayOf(r) === node.day).length;
      const item = new vscode.TreeItem(dayLabel(node.day), vscode.TreeItemCollapsibleState.Expanded);
      item.id = node.id;
      item.description = plural(count, 'run');
      item.iconPath = new vscode.ThemeIcon('calendar');
      item.contextValue = 'runsDay';
      item.accessibilityInformation = { label: `${dayLabel(node.day)}, ${plural(count, 'run')}` };
      return item;
    }
    const run = this.runs.get(node.runId);
    const item = new vscode.TreeItem(run?.fetcher ?? node.runId, vscode.TreeItemCollapsibleState.None);
    item.id = node.id;
    if (!run) return item;
    const started = new Date(run.startedAt ?? run.enqueuedAt).toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' });
    item.description = [started, triggerWords(run.trigger), duration(run), run.status === 'running' ? '' : outcome(run), peakMemory(run)]
      .filter((p) => p !== '')
      .join(' · ');
    item.tooltip = runTooltip(run);
    item.iconPath = runIcon(run);
    item.accessibilityInformation = { label: spokenRun(run) };
    item.contextValue = `runs.${run.status}`;
    item.command = { command: 'quantilica.showRunLog', title: 'Show Run Log', arguments: [run.runId] };
    return item;
  }

  getChildren(node?: RunsNode): RunsNode[] {
    if (!node) return this.days().map((day) => this.node({ kind: 'day', id: `day:${day}`, day }));
    if (node.kind === 'day')
      return this.visibleRuns()
        .filter((r) => dayOf(r) === node.day)
        .map((r) => this.node({ kind: 'run', id: `run:${r.runId}`, runId: r.runId }));
    return [];
  }

  getParent(node: RunsNode): RunsNode | undefined {
    if (node.kind === 'day') return undefined;
    const run = this.runs.get(node.runId);
    return run ? this.nodes.get(`day:${dayOf(run)}`) : undefined;
  }

  dispose(): void {
    clearInterval(this.ticker);
    this.emitter.dispose();
    this.filterEmitter.dispose();
  }

  /** The agent's history (its run store), merged with what the change events already brought. */
  private async load(): Promise<void> {
    try {
      const { runs } = await sendRequest(this.session.client(), ListRuns.type, { limit: MAX_RUNS });
      for (const run of runs) if (!this.runs.has(run.runId) || rank(run) >= rank(this.runs.get(run.runId)!)) this.runs.set(run.runId, run);
      this.trim();
      this.emitter.fire(undefined);
    } catch (err) {
      this.log.info(`could not load the run history: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  private visible(run: RunInfo): boolean {
    return (!this.filter.fetcher || run.fetcher === this.filter.fetcher) && (!this.filter.status || run.status === this.filter.status);
  }

  private visibleRuns(): RunInfo[] {
    return [...this.runs.values()].filter((r) => this.visible(r)).sort((a, b) => sortKey(b).localeCompare(sortKey(a)));
  }

  private days(): string[] {
    return [...new Set(this.visibleRuns().map(dayOf))];
  }

  private trim(): void {
    if (this.runs.size <= MAX_RUNS) return;
    const keep = new Set(
      [...this.runs.values()]
        .sort((a, b) => sortKey(b).localeCompare(sortKey(a)))
        .slice(0, MAX_RUNS)
        .map((r) => r.runId),
    );
    for (const id of this.runs.keys()) if (!keep.has(id)) this.runs.delete(id);
  }

  /** Running rows show a duration that grows: refresh those rows only. */
  private tick(): void {
    for (const run of this.runs.values()) {
      if (run.status === 'running' && this.visible(run) && this.nodes.has(`run:${run.runId}`))
        this.emitter.fire(this.nodes.get(`run:${run.runId}`));
    }
  }

  private node<T extends RunsNode>(fresh: T): T {
    const cached = this.nodes.get(fresh.id);
    if (cached) return cached as T;
    this.nodes.set(fresh.id, fresh);
    return fresh;
  }
}

function sortKey(run: RunInfo): string {
  return run.startedAt ?? run.enqueuedAt;
}

/** A later state of the same run wins over an earlier one (a change event may beat the history). */
function rank(run: RunInfo): number {
  return run.status === 'waiting' ? 0 : run.status === 'running' ? 1 : 2;
}

/** The local calendar day of a run, `YYYY-MM-DD`. */
function dayOf(run: RunInfo): string {
  const d = new Date(sortKey(run));
  return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}-${String(d.getDate()).padStart(2, '0')}`;
}

function dayLabel(day: string): string {
  const today = new Date();
  const key = (d: Date) => `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}-${String(d.getDate()).padStart(2, '0')}`;
  if (day === key(today)) return 'Today';
  if (day === key(new Date(today.getTime() - 86_400_000))) return 'Yesterday';
  const [y, m, d] = day.split('-').map(Number);
  return new Date(y ?? 1970, (m ?? 1) - 1, d ?? 1).toLocaleDateString(undefined, {
    weekday: 'short',
    day: 'numeric',
    month: 'short',
    year: 'numeric',
  });
}
