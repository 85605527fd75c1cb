import * as vscode from 'vscode';
import type { DiskStatus, SpoolStatus } from '../shared/protocol';
import type { SessionState } from './agentSession';
import { plural } from '../shared/humanWords';
import { elapsed, gb } from './describe';

/** Everything the gauge shows comes from exactly one of these. */
export type GaugeState =
  | { kind: 'agentDown'; reason: string }
  | { kind: 'connecting' }
  /** Connected, but the agent reports no disk status (yet). */
  | { kind: 'noDisk'; spool: SpoolStatus | null }
  | { kind: 'disk'; disk: DiskStatus; spool: SpoolStatus | null };

export const SHOW_DETAILS_COMMAND = 'quantilica.showDiskDetails';

export function gaugeState(session: SessionState, disk: DiskStatus | null | undefined, spool: SpoolStatus | null | undefined): GaugeState {
  if (session.kind === 'down') return { kind: 'agentDown', reason: session.reason };
  if (session.kind === 'connecting') return { kind: 'connecting' };
  return disk ? { kind: 'disk', disk, spool: spool ?? null } : { kind: 'noDisk', spool: spool ?? null };
}

/**
 * The status-bar disk gauge: free space and the gate's state, the theme's warning background for
 * `warn`/`unknown` and error background for `paused`, a Markdown tooltip with the thresholds, spool
 * depth and last flush; a click opens the details (or offers to start the agent when it is down).
 */
export class DiskStatusItem implements vscode.Disposable {
  private readonly item = vscode.window.createStatusBarItem('quantilica.disk', vscode.StatusBarAlignment.Left, 10);
  private state: GaugeState = { kind: 'connecting' };
  /** "Checked 3 s ago" and the spool's ages count on between the agent's reports. */
  private readonly ticker = setInterval(() => {
    if (this.state.kind === 'disk' || this.state.kind === 'noDisk') this.render();
  }, 1000);

  constructor() {
    this.item.name = 'Quantilica disk gauge';
    this.render();
    this.item.show();
  }

  get current(): GaugeState {
    return this.state;
  }

  /** What the item shows now; tests compare it with the agent's state. */
  get view(): { text: string; background: string | undefined; tooltip: string; accessibleLabel: string } {
    const tooltip = this.item.tooltip;
    return {
      text: this.item.text,
      accessibleLabel: this.item.accessibilityInformation?.label ?? '',
      background: this.item.backgroundColor?.id,
      tooltip: typeof tooltip === 'string' ? tooltip : (tooltip?.value ?? ''),
    };
  }

  set(state: GaugeState): void {
    if (JSON.stringify(state) === JSON.stringify(this.state)) return;
    this.state = state;
    this.render();
  }

  dispose(): void {
    clearInterval(this.ticker);
    this.item.dispose();
  }

  private render(): void {
    const s = this.state;
    const item = this.item;
    item.command = s.kind === 'agentDown' ? 'quantilica.startAgent' : SHOW_DETAILS_COMMAND;
    // A screen reader reads this label, never the Markdown tooltip.
    item.accessibilityInformation = { label: spokenGauge(s) };
    switch (s.kind) {
      case 'agentDown':
        item.text = '$(debug-disconnect) Quantilica: agent down';
        item.backgroundColor = undefined;
        item.tooltip = markdown(
          `**Quantilica agent not connected**\n\n${escape(s.reason)}\n\nThe extension reconnects by itself when an agent starts. Click to start one.`,
        );
        return;
      case 'connecting':
        item.text = '$(sync~spin) Quantilica';
        item.backgroundColor = undefined;
        item.tooltip = 'Connecting to the Quantilica agent…';
        return;
      case 'noDisk':
        item.text = '$(database) disk ?';
        item.backgroundColor = undefined;
        item.tooltip = markdown(`**Disk gate**: no status from the agent yet\n\n${spoolLines(s.spool)}`);
        return;
      case 'disk': {
        const d = s.disk;
        const free = d.freeGb === null ? '?' : gb(d.freeGb);
        item.text = `${icon(d.state)} ${free} free · ${d.state}`;
        item.backgroundColor = background(d.state);
        item.tooltip = markdown(diskMarkdown(d, s.spool));
      }
    }
  }
}

/** The gauge in plain words: no Markdown, no icons, units spelled out. */
export function spokenGauge(s: GaugeState): string {
  switch (s.kind) {
    case 'agentDown':
      return `Quantilica agent not connected: ${s.reason}. Activate to start the agent.`;
    case 'connecting':
      return 'Quantilica: connecting to the agent';
    case 'noDisk':
      return `Quantilica disk gate: no status from the agent yet. ${spokenSpool(s.spool)}`;
    case 'disk': {
      const d = s.disk;
      const free =
        d.freeGb === null ? 'free space unknown' : `${gigabytes(d.freeGb)} free${d.totalGb === null ? '' : ` of ${gigabytes(d.totalGb)}`}`;
      return `Quantilica disk gate ${d.state}: ${free}; new fetchers pause below ${gigabytes(d.pauseGb)} and start again at ${gigabytes(d.resumeGb)}. ${spokenSpool(s.spool)} Activate for the details.`;
    }
  }
}

function gigabytes(value: number): string {
  return `${gb(value).replace(' GB', '')} gigabytes`;
}

function spokenSpool(spool: SpoolStatus | null): string {
  if (!spool) return 'Telemetry: no status.';
  if (spool.database === 'not-configured')
    return `Telemetry: local only, no database is configured; ${plural(spool.pending, 'event')} in the spool.`;
  return `Telemetry: ${plural(spool.pending, 'event')} waiting to be sent; database ${spool.database === 'down' ? 'unreachable' : 'connected'}.`;
}

function icon(state: DiskStatus['state']): string {
  return { ok: '$(database)', warn: '$(warning)', paused: '$(debug-pause)', unknown: '$(question)' }[state];
}

function background(state: DiskStatus['state']): vscode.ThemeColor | undefined {
  if (state === 'paused') return new vscode.ThemeColor('statusBarItem.errorBackground');
  if (state === 'warn' || state === 'unknown') return new vscode.ThemeColor('statusBarItem.warningBackground');
  return undefined;
}

/** The details a click opens and the tooltip shows. */
export function diskMarkdown(d: DiskStatus, spool: SpoolStatus | null): string {
  const lines = [
    `**Disk gate: ${d.state}** — ${escape(d.path)}`,
    '',
    `| | |`,
    `|---|---|`,
    `| free | ${d.freeGb === null ? 'unknown' : gb(d.freeGb)}${d.totalGb === null ? '' : ` of ${gb(d.totalGb)}`} |`,
    `| warn below | ${gb(d.warnGb)} |`,
    `| pause below | ${gb(d.pauseGb)} |`,
    `| resume at | ${gb(d.resumeGb)} |`,
  ];
  if (d.next) lines.push(`| next: ${d.next.threshold} | ${gb(d.next.gb)}, ${gb(d.next.distanceGb)} away |`);
  if (d.error) lines.push('', `Error: ${escape(d.error)}`);
  lines.push('', `Checked ${elapsed(d.checkedAt)} ago.`, '', spoolLines(spool));
  return lines.join('\n');
}

function spoolLines(spool: SpoolStatus | null): string {
  if (!spool) return '**Telemetry spool**: no status';
  const oldest =
    spool.oldestAgeSeconds === null || spool.pending === 0
      ? ''
      : `, the oldest unsent for ${elapsed(new Date(Date.now() - spool.oldestAgeSeconds * 1000).toISOString())}`;
  const flush = spool.lastFlushAt ? `${elapsed(spool.lastFlushAt)} ago` : 'never';
  const error = spool.lastFlushError ? ` (error: ${escape(spool.lastFlushError)})` : '';
  // Rows the flush set aside (invalid, or refused by PostgreSQL) need a person: say how many.
  const quarantined = (spool.quarantined ?? 0) > 0 ? `; **${spool.quarantined} quarantined**` : '';
  if (spool.database === 'not-configured') {
    return `**Telemetry spool**: local only — no database is configured (QUANTILICA\\_DATABASE\\_URL), so the ${plural(spool.pending, 'event')} stay in the spool by choice${spool.fallback ? '; using the fallback spool' : ''}${quarantined}`;
  }
  const database = spool.database === 'down' ? '**database unreachable**' : 'database connected';
  return `**Telemetry spool**: ${spool.pending} pending${oldest}; last flush ${flush}${error}; ${database}${spool.fallback ? '; using the fallback spool' : ''}${quarantined}`;
}

function markdown(text: string): vscode.MarkdownString {
  const md = new vscode.MarkdownString(text);
  md.isTrusted = false;
  md.supportThemeIcons = true;
  return md;
}

function escape(text: string): string {
  return text.replace(/[\\`*_{}[\]()#+\-.!|<>]/g, '\\$&');
}
