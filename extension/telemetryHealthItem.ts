import * as vscode from 'vscode';
import type { SpoolStatus } from '../shared/protocol';
import { elapsed } from './describe';

/**
 * A warning item that appears only when telemetry has not reached a configured PostgreSQL for
 * longer than `quantilica.telemetry.staleMinutes`: the oldest unsent event is older than that.
 * Without a database the spool is local by choice, which is no reason to warn (the gauge's tooltip
 * says so). The age keeps
 * counting between spool updates (the agent reports the age when it reports the spool).
 */
export class TelemetryHealthItem implements vscode.Disposable {
  private readonly item = vscode.window.createStatusBarItem('quantilica.telemetry', vscode.StatusBarAlignment.Left, 9);
  private spool: SpoolStatus | null = null;
  private receivedAt = Date.now();
  private readonly ticker = setInterval(() => this.render(), 5000);
  private readonly settings = vscode.workspace.onDidChangeConfiguration((e) => {
    if (e.affectsConfiguration('quantilica.telemetry.staleMinutes')) this.render();
  });

  constructor() {
    this.item.name = 'Quantilica telemetry';
    this.item.command = 'quantilica.flushTelemetry';
    this.item.backgroundColor = new vscode.ThemeColor('statusBarItem.warningBackground');
  }

  /** Seconds the oldest unsent event has waited, now; null when nothing waits. */
  get oldestAgeSeconds(): number | null {
    if (!this.spool || this.spool.pending === 0 || this.spool.oldestAgeSeconds === null) return null;
    return this.spool.oldestAgeSeconds + (Date.now() - this.receivedAt) / 1000;
  }

  /** What the status bar item shows (for the extension-host tests). */
  get view(): { text: string; tooltip: string } {
    const tooltip = this.item.tooltip;
    return { text: this.item.text, tooltip: typeof tooltip === 'string' ? tooltip : (tooltip?.value ?? '') };
  }

  get visible(): boolean {
    return this.shown;
  }

  private shown = false;

  set(spool: SpoolStatus | null): void {
    this.spool = spool;
    this.receivedAt = Date.now();
    this.render();
  }

  dispose(): void {
    clearInterval(this.ticker);
    this.settings.dispose();
    this.item.dispose();
  }

  private render(): void {
    const age = this.oldestAgeSeconds;
    const limit = vscode.workspace.getConfiguration('quantilica.telemetry').get<number>('staleMinutes', 15) * 60;
    if (!this.spool || this.spool.database === 'not-configured' || age === null || age < limit) {
      this.item.hide();
      this.shown = false;
      return;
    }
    const since = new Date(Date.now() - age * 1000).toISOString();
    this.item.text = `$(cloud-offline) telemetry ${elapsed(since)} behind`;
    const why = this.spool.database === 'down' ? 'PostgreSQL is unreachable' : (this.spool.lastFlushError ?? 'the flush has not caught up');
    this.item.tooltip = `${this.spool.pending} telemetry events have not reached PostgreSQL; the oldest waits for ${elapsed(since)} (${why}). Click to flush now.`;
    this.item.accessibilityInformation = {
      label: `Quantilica telemetry: ${this.spool.pending} events not sent for ${elapsed(since)}, ${why}`,
    };
    this.item.show();
    this.shown = true;
  }
}
