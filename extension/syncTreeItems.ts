import * as vscode from 'vscode';
import { plural, reasonWords } from '../shared/humanWords';
import type { GithubStage, GithubSyncInfo, Snapshot } from '../shared/protocol';
import { localTime } from './runPresentation';

/** The "GitHub sync" group of the pools tree and its lines (stages, hibernation, not reached). */
export type SyncNode =
  | { kind: 'sync'; id: 'sync'; pool: '' }
  | { kind: 'syncStage'; id: string; pool: ''; stage: GithubStage }
  | { kind: 'syncHibernating'; id: 'sync:hibernating'; pool: '' }
  | { kind: 'syncMissed'; id: string; pool: ''; stage: GithubStage; repo: string };

const STAGES: readonly GithubStage[] = ['changes', 'checks'];

export function syncChildren(sync: GithubSyncInfo, node: SyncNode): SyncNode[] {
  if (node.kind === 'sync') {
    const lines: SyncNode[] = STAGES.map((stage) => ({ kind: 'syncStage', id: `sync:stage:${stage}`, pool: '', stage }));
    if (sync.hibernatingUntil !== null) lines.unshift({ kind: 'syncHibernating', id: 'sync:hibernating', pool: '' });
    return lines;
  }
  if (node.kind === 'syncStage') {
    return sync.stages[node.stage].notReachedRepos.map((m) => ({
      kind: 'syncMissed',
      id: `sync:missed:${node.stage}:${m.repo}`,
      pool: '',
      stage: node.stage,
      repo: m.repo,
    }));
  }
  return [];
}

export function isSyncNode(node: { kind: string }): node is SyncNode {
  return node.kind.startsWith('sync');
}

/** "14:05" and "in 3 min 20 s" (or "now"), for the hibernation line. */
export function countdown(until: string, now = Date.now()): string {
  const left = Math.max(0, Math.round((Date.parse(until) - now) / 1000));
  const at = new Date(until).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  if (left === 0) return `${at}, waking now`;
  const minutes = Math.floor(left / 60);
  return `${at}, in ${minutes > 0 ? `${minutes} min ` : ''}${left % 60} s`;
}

/**
 * Which catalog entry ran the sync: the agent that ran it says so; one that found it in the store at
 * start names only its run, whose fetcher and catalog entry say the rest. No run: a CLI's sync.
 */
export function syncSource(sync: GithubSyncInfo, snapshot: Snapshot | null | undefined): { name: string; demo: boolean } {
  const fetcher =
    sync.fetcher ??
    (sync.runId !== null
      ? (snapshot?.runs.find((r) => r.runId === sync.runId)?.fetcher ??
        snapshot?.catalog.find((e) => e.kind === 'github-sync')?.name ??
        null)
      : null);
  if (fetcher === null) return { name: 'started from the CLI', demo: sync.demo };
  return { name: fetcher, demo: sync.demo || (snapshot?.catalog.find((e) => e.name === fetcher)?.demo ?? false) };
}

export function syncItem(sync: GithubSyncInfo | null | undefined, node: SyncNode, snapshot?: Snapshot | null): vscode.TreeItem {
  if (!sync) return new vscode.TreeItem('GitHub sync');
  switch (node.kind) {
    case 'sync': {
      const item = new vscode.TreeItem('GitHub sync', vscode.TreeItemCollapsibleState.Expanded);
      item.id = node.id;
      const state = sync.hibernatingUntil !== null ? 'hibernating' : sync.status;
      const source = syncSource(sync, snapshot);
      const label = `${source.name}${source.demo ? ' (demo)' : ''}`;
      item.description = `${label} · ${state} · ${plural(sync.counters.records_collected, 'record')} · ${plural(sync.counters.requests_made, 'request')}`;
      item.tooltip =
        `sync ${sync.syncId}${sync.runId ? ` · run ${sync.runId}` : ''}\nrecords ${sync.counters.records_collected} (${sync.counters.records_created} new) · requests ${sync.counters.requests_made} made, ${sync.counters.requests_saved} saved · hibernations ${sync.counters.hibernations}` +
        Object.entries(sync.quota)
          .map(([budget, q]) => `\n${budget} budget: ${q.remaining}/${q.limit} left, resets ${localTime(q.resetAt)}`)
          .join('');
      const quota = Object.entries(sync.quota)
        .map(([budget, q]) => `${budget} budget ${q.remaining} of ${q.limit} left, resets ${localTime(q.resetAt)}`)
        .join('; ');
      item.accessibilityInformation = {
        label: `GitHub sync ${label}, ${state}${sync.reason ? `, ${reasonWords(sync.reason)}` : ''}, started ${localTime(sync.startedAt)}${sync.finishedAt ? `, finished ${localTime(sync.finishedAt)}` : ''}, ${plural(sync.counters.records_collected, 'record')}, ${plural(sync.counters.requests_made, 'request')}, ${plural(sync.counters.hibernations, 'hibernation')}${quota ? `; ${quota}` : ''}`,
      };
      item.iconPath = new vscode.ThemeIcon(
        sync.hibernatingUntil !== null
          ? 'debug-pause'
          : sync.status === 'running'
            ? 'sync~spin'
            : sync.status === 'completed'
              ? 'pass'
              : 'error',
      );
      item.contextValue = 'githubSync';
      return item;
    }
    case 'syncStage': {
      const p = sync.stages[node.stage];
      const item = new vscode.TreeItem(
        node.stage,
        p.notReached > 0 ? vscode.TreeItemCollapsibleState.Collapsed : vscode.TreeItemCollapsibleState.None,
      );
      item.id = node.id;
      item.description = `${p.done}/${p.total} done${p.notReached > 0 ? ` · ${p.notReached} not reached` : ''}`;
      item.accessibilityInformation = {
        label: `stage ${node.stage}: ${p.done} of ${plural(p.total, 'repository', 'repositories')} done${p.notReached > 0 ? `, ${p.notReached} not reached` : ''}`,
      };
      item.iconPath = new vscode.ThemeIcon(p.done + p.notReached === p.total ? 'check' : 'loading~spin');
      return item;
    }
    case 'syncHibernating': {
      const item = new vscode.TreeItem(
        `hibernating until ${countdown(sync.hibernatingUntil ?? new Date().toISOString())}`,
        vscode.TreeItemCollapsibleState.None,
      );
      item.id = node.id;
      item.description = `(${sync.budget ?? '?'} budget)`;
      item.tooltip = `The sync waits for GitHub's ${sync.budget ?? '?'} rate limit to reset at ${sync.hibernatingUntil ? localTime(sync.hibernatingUntil) : '?'}; it holds no slot meanwhile.`;
      item.accessibilityInformation = {
        label: `hibernating until ${sync.hibernatingUntil ? localTime(sync.hibernatingUntil) : 'unknown'}, waiting for the ${sync.budget ?? 'unknown'} budget; no slot held`,
      };
      item.iconPath = new vscode.ThemeIcon('watch');
      return item;
    }
    case 'syncMissed': {
      const reason = sync.stages[node.stage].notReachedRepos.find((m) => m.repo === node.repo)?.reason ?? '';
      const item = new vscode.TreeItem(node.repo, vscode.TreeItemCollapsibleState.None);
      item.id = node.id;
      item.description = reasonWords(reason);
      item.tooltip = `${node.repo}: not reached (${reason})`;
      item.accessibilityInformation = { label: `${node.repo}, not reached in stage ${node.stage}: ${reasonWords(reason)}` };
      item.iconPath = new vscode.ThemeIcon('warning');
      return item;
    }
  }
}
