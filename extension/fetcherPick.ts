import * as vscode from 'vscode';
import { isFinalStatus, type RunInfo, type Snapshot } from '../shared/protocol';
import { describeResult, elapsed } from './describe';

export interface FetcherPickItem extends vscode.QuickPickItem {
  name?: string;
}

/**
 * The Run Fetcher pick: fetchers grouped by pool (separators), the ones running or waiting now say
 * so, the others show their last result.
 */
export function fetcherPickItems(snapshot: Snapshot): FetcherPickItem[] {
  const last = new Map<string, RunInfo>();
  const active = new Map<string, RunInfo>();
  for (const run of snapshot.runs) {
    if (!isFinalStatus(run.status) && !active.has(run.fetcher)) active.set(run.fetcher, run);
    if (run.finishedAt && !last.has(run.fetcher)) last.set(run.fetcher, run);
  }
  const pools = [...new Set(snapshot.catalog.map((e) => e.pool))];
  const items: FetcherPickItem[] = [];
  for (const pool of pools) {
    items.push({ label: pool, kind: vscode.QuickPickItemKind.Separator });
    for (const entry of snapshot.catalog.filter((e) => e.pool === pool)) {
      const now = active.get(entry.name);
      const previous = last.get(entry.name);
      items.push({
        label: entry.name,
        iconPath: now ? new vscode.ThemeIcon(now.status === 'running' ? 'sync~spin' : 'clock') : undefined,
        description: now
          ? now.status === 'running'
            ? `running now${now.startedAt ? ` (${elapsed(now.startedAt)})` : ''}`
            : 'waiting now'
          : undefined,
        detail: previous ? `last: ${describeResult(previous)}` : 'no recent run',
        name: entry.name,
      });
    }
  }
  return items;
}

/** The active run of a fetcher, if any: a second run needs the user's word. */
export function activeRunOf(snapshot: Snapshot | null, fetcher: string): RunInfo | undefined {
  return snapshot?.runs.find(
    (r) =>
      (r.fetcher === fetcher || snapshot.catalog.find((e) => e.name === r.fetcher)?.aliases.includes(fetcher)) && !isFinalStatus(r.status),
  );
}
