import * as vscode from 'vscode';
import type { RunInfo, ScheduleEntry, Snapshot } from '../shared/protocol';
import type { StateEvent } from './agentSession';
import { clockTime } from '../shared/humanWords';
import { localTime, outcome, runIcon, timeZone } from './runPresentation';

export type ScheduleNode = { kind: 'entry'; id: string; fetcher: string };

/** Refresh of the "in 2 h 10 min" countdowns: a minute is their resolution. */
const COUNTDOWN_MS = 30_000;

/**
 * The Schedule view, like `systemctl list-timers`: each scheduled fetcher with its next due time
 * (relative, the exact local time and zone in the tooltip), its last run and outcome, and whether it
 * is paused; inline Pause/Resume and Run Now.
 */
export class ScheduleTreeProvider implements vscode.TreeDataProvider<ScheduleNode>, vscode.Disposable {
  private readonly emitter = new vscode.EventEmitter<ScheduleNode | undefined>();
  readonly onDidChangeTreeData = this.emitter.event;
  private snapshot: Snapshot | null = null;
  private readonly nodes = new Map<string, ScheduleNode>();
  private readonly ticker = setInterval(() => {
    for (const n of this.nodes.values()) this.emitter.fire(n);
  }, COUNTDOWN_MS);

  update(event: StateEvent): void {
    if (event.kind === 'reset') {
      this.snapshot = event.snapshot;
      this.emitter.fire(undefined);
      return;
    }
    const before = this.snapshot;
    this.snapshot = event.after;
    const change = event.params.change;
    if (change.kind === 'schedule') {
      const old = new Map((before?.schedule?.entries ?? []).map((e) => [e.fetcher, e]));
      if (before?.schedule?.paused !== change.schedule.paused || old.size !== change.schedule.entries.length) {
        this.emitter.fire(undefined);
        return;
      }
      for (const entry of change.schedule.entries) {
        if (JSON.stringify(old.get(entry.fetcher)) !== JSON.stringify(entry)) this.emitter.fire(this.node(entry.fetcher));
      }
    } else if (change.kind === 'run' && change.run.finishedAt && this.nodes.has(`schedule:${change.run.fetcher}`)) {
      this.emitter.fire(this.node(change.run.fetcher));
    }
  }

  entry(fetcher: string): ScheduleEntry | undefined {
    return this.snapshot?.schedule?.entries.find((e) => e.fetcher === fetcher);
  }

  getTreeItem(node: ScheduleNode): vscode.TreeItem {
    const entry = this.entry(node.fetcher);
    const item = new vscode.TreeItem(node.fetcher, vscode.TreeItemCollapsibleState.None);
    item.id = node.id;
    if (!entry) return item;
    const globalPause = this.snapshot?.schedule?.paused ?? false;
    const paused = entry.paused || globalPause;
    const last = lastRun(this.snapshot, entry.fetcher);
    const lastText = last
      ? last.status === 'running' || last.status === 'waiting'
        ? `${last.status} now`
        : `last ${last.status}`
      : entry.lastRunAt
        ? `last ${relative(entry.lastRunAt)}`
        : 'never ran';
    // Late: a due time passed without a completed run within the entry's lateAfterMinutes.
    const late = entry.lateSince ? `late since ${clockTime(entry.lateSince)}` : '';
    const when = paused
      ? globalPause && !entry.paused
        ? 'paused with the whole schedule'
        : 'paused'
      : entry.nextDue
        ? relative(entry.nextDue)
        : 'not due';
    item.description = [late, when, lastText].filter((p) => p !== '').join(' · ');
    const md = new vscode.MarkdownString(undefined, true);
    md.appendMarkdown(
      `**${entry.fetcher}** — ${paused ? (globalPause ? 'paused (the whole schedule)' : 'paused') : 'scheduled'}${entry.lateSince ? ' — **late**' : ''}\n\n`,
    );
    const lines = [
      `Next: ${entry.nextDue && !paused ? `${localTime(entry.nextDue)}, ${relative(entry.nextDue)}` : '—'}`,
      `Cron: \`${entry.cron ?? '—'}\` (${entry.timezone ?? timeZone()})`,
      `Last run: ${last ? `${localTime(last.startedAt ?? last.enqueuedAt)}, ${outcome(last)}` : localTime(entry.lastRunAt)}`,
    ];
    if (entry.lateSince)
      lines.push(
        `Late since ${localTime(entry.lateSince)}: no completed run within ${entry.lateAfterMinutes ?? '?'} min of a due time; the last success ${entry.lastSuccessAt ? localTime(entry.lastSuccessAt) : 'never happened'}`,
      );
    md.appendMarkdown(lines.join('  \n'));
    item.tooltip = md;
    item.iconPath = entry.lateSince
      ? new vscode.ThemeIcon('warning', new vscode.ThemeColor('list.warningForeground'))
      : paused
        ? new vscode.ThemeIcon('debug-pause', new vscode.ThemeColor('charts.yellow'))
        : last && last.status !== 'running' && last.status !== 'waiting'
          ? runIcon(last)
          : new vscode.ThemeIcon('watch');
    // Under a whole-schedule pause a row offers neither Pause (it is paused) nor its own Resume
    // (the view's title has Resume); a row paused on its own offers Resume.
    item.contextValue = entry.paused ? 'schedule.paused' : globalPause ? 'schedule.heldByWholePause' : 'schedule.active';
    item.accessibilityInformation = {
      label: [entry.fetcher, late, paused ? when : entry.nextDue ? `next ${relative(entry.nextDue)}` : 'not due', lastText]
        .filter((p) => p !== '')
        .join(', '),
    };
    return item;
  }

  getChildren(node?: ScheduleNode): ScheduleNode[] {
    if (node) return [];
    const entries = [...(this.snapshot?.schedule?.entries ?? [])].sort((a, b) => (a.nextDue ?? '9').localeCompare(b.nextDue ?? '9'));
    return entries.map((e) => this.node(e.fetcher));
  }

  dispose(): void {
    clearInterval(this.ticker);
    this.emitter.dispose();
  }

  private node(fetcher: string): ScheduleNode {
    const id = `schedule:${fetcher}`;
    let node = this.nodes.get(id);
    if (!node) {
      node = { kind: 'entry', id, fetcher };
      this.nodes.set(id, node);
    }
    return node;
  }
}

function lastRun(snapshot: Snapshot | null, fetcher: string): RunInfo | undefined {
  return snapshot?.runs.find((r) => r.fetcher === fetcher);
}

/** "in 2 h 10 min", "5 min ago", "now". */
export function relative(iso: string, now = Date.now()): string {
  const ms = Date.parse(iso) - now;
  const minutes = Math.round(Math.abs(ms) / 60_000);
  if (minutes < 1) return 'now';
  const text =
    minutes < 60
      ? `${minutes} min`
      : minutes < 48 * 60
        ? `${Math.floor(minutes / 60)} h ${minutes % 60} min`
        : `${Math.round(minutes / 1440)} days`;
  return ms > 0 ? `in ${text}` : `${text} ago`;
}
