import * as crypto from 'node:crypto';
import * as vscode from 'vscode';
import { GetHistory, type StationHistory } from '../shared/protocol';
import type { AgentSession, SessionState } from './agentSession';
import { sendRequest } from './protocolCalls';

/** What the webview reported after drawing (the tests check the DOM through this). */
export interface StationRendered {
  lanes: Array<{ lane: string; runs: number; fetchers: string }>;
  canvases: number;
  bars: number;
  diskPoints: number;
  /** The hours shown (1, 6 or 24). */
  hours: number;
  /** The GitHub sync's lane: its runs' working spans, and whether a hibernation (no slot) is drawn. */
  sync: { spans: number; hibernating: boolean };
  /** The down message when no agent answers (the charts are hidden then), or null; and whether Start Agent shows. */
  down: string | null;
  canStart: boolean;
  /** The range buttons' labels, and which one is pressed. */
  ranges: Array<{ label: string; pressed: boolean }>;
}

/** What the webview keeps across a window reload (vscode.setState), handed to the serializer. */
export interface StationState {
  hours?: number;
}

export const STATION_RANGES = [1, 6, 24] as const;
const REFRESH_MS = 60_000;

/**
 * The Station panel: a webview with the last 1, 6 or 24 hours (slot timeline with the GitHub sync's
 * slot use, free disk with thresholds) from `quantilica/history`. With no agent it says so, with Start
 * Agent, and draws again once one answers; a window reload restores it (it is its own serializer).
 * Strict CSP: no remote resources, one script (the bundle in dist/webview, chart.js inside) allowed
 * by nonce, styles from the extension and by nonce.
 */
export class StationPanel implements vscode.Disposable, vscode.WebviewPanelSerializer<StationState> {
  static readonly viewType = 'quantilica.station';
  private panel: vscode.WebviewPanel | null = null;
  private timer: NodeJS.Timeout | null = null;
  private readonly renderedEmitter = new vscode.EventEmitter<StationRendered>();
  readonly onDidRender = this.renderedEmitter.event;
  lastRendered: StationRendered | null = null;
  private pending: NodeJS.Timeout | null = null;
  private readonly subscriptions: vscode.Disposable[];
  private hours = 24;
  /** The last "no history" reason logged: a down agent is said once, not on every refresh. */
  private lastFailure: string | null = null;

  constructor(
    private readonly extensionUri: vscode.Uri,
    private readonly session: AgentSession,
    private readonly log: vscode.LogOutputChannel,
  ) {
    this.subscriptions = [
      // A run that starts or ends moves a bar: refresh soon, at most once every 2 s.
      session.onDidChange((event) => {
        if (!this.panel || (event.kind === 'change' && event.params.change.kind !== 'run' && event.params.change.kind !== 'sync')) return;
        if (!this.pending)
          this.pending = setTimeout(() => {
            this.pending = null;
            void this.refresh();
          }, 2000);
      }),
      session.onDidChangeState((state) => {
        if (this.panel) void this.showState(state);
      }),
    ];
  }

  show(): void {
    if (this.panel) {
      this.panel.reveal();
      void this.refresh();
      return;
    }
    const panel = vscode.window.createWebviewPanel(StationPanel.viewType, 'Quantilica Station', vscode.ViewColumn.Active, this.options());
    this.adopt(panel);
  }

  /** VS Code restores the panel after a window reload through this (registerWebviewPanelSerializer). */
  deserializeWebviewPanel(panel: vscode.WebviewPanel, state: StationState | undefined): Thenable<void> {
    if (state?.hours && (STATION_RANGES as readonly number[]).includes(state.hours)) this.hours = state.hours;
    if (this.panel && this.panel !== panel) this.panel.dispose();
    this.adopt(panel);
    return Promise.resolve();
  }

  /** The range buttons (1 h, 6 h, 24 h): the hours the charts show. */
  async setRange(hours: number): Promise<void> {
    if (!(STATION_RANGES as readonly number[]).includes(hours)) return;
    this.hours = hours;
    await this.refresh();
  }

  async refresh(): Promise<void> {
    const panel = this.panel;
    if (!panel) return;
    if (this.session.state.kind !== 'connected') {
      await this.showState(this.session.state);
      return;
    }
    try {
      const history = await sendRequest(this.session.client(), GetHistory.type, { hours: this.hours });
      this.lastFailure = null;
      await panel.webview.postMessage({ type: 'history', history: withSync(history, this.session), hours: this.hours });
    } catch (err) {
      const reason = err instanceof Error ? err.message : String(err);
      if (reason !== this.lastFailure) this.log.info(`station panel: no history (${reason})`);
      this.lastFailure = reason;
    }
  }

  dispose(): void {
    for (const s of this.subscriptions) s.dispose();
    if (this.pending) clearTimeout(this.pending);
    this.panel?.dispose();
    this.renderedEmitter.dispose();
  }

  private options(): vscode.WebviewPanelOptions & vscode.WebviewOptions {
    return {
      enableScripts: true,
      localResourceRoots: [vscode.Uri.joinPath(this.extensionUri, 'dist', 'webview')],
      retainContextWhenHidden: false,
    };
  }

  private adopt(panel: vscode.WebviewPanel): void {
    this.panel = panel;
    panel.webview.options = this.options();
    panel.iconPath = vscode.Uri.joinPath(this.extensionUri, 'media', 'icon.png');
    panel.webview.html = html(panel.webview, vscode.Uri.joinPath(this.extensionUri, 'dist', 'webview', 'station.js'), this.hours);
    panel.webview.onDidReceiveMessage((message: { type: string; hours?: number } & Partial<StationRendered>) => {
      if (message.type === 'ready') void this.refresh();
      if (message.type === 'range' && message.hours) void this.setRange(message.hours);
      if (message.type === 'startAgent') void vscode.commands.executeCommand('quantilica.startAgent');
      if (message.type === 'rendered') {
        this.lastRendered = {
          lanes: message.lanes ?? [],
          canvases: message.canvases ?? 0,
          bars: message.bars ?? 0,
          diskPoints: message.diskPoints ?? 0,
          hours: message.hours ?? this.hours,
          sync: message.sync ?? { spans: 0, hibernating: false },
          down: message.down ?? null,
          canStart: message.canStart ?? false,
          ranges: message.ranges ?? [],
        };
        this.renderedEmitter.fire(this.lastRendered);
      }
    });
    panel.onDidDispose(() => {
      if (this.panel !== panel) return;
      this.panel = null;
      if (this.timer) clearInterval(this.timer);
      this.timer = null;
    });
    if (this.timer) clearInterval(this.timer);
    this.timer = setInterval(() => void this.refresh(), REFRESH_MS);
  }

  /** Down: the panel says so (with Start Agent) instead of waiting for a history that cannot come. */
  private async showState(state: SessionState): Promise<void> {
    if (state.kind === 'connected') {
      await this.refresh();
      return;
    }
    const message =
      state.kind === 'down'
        ? 'The Quantilica agent is not running, so there is no station history to show.'
        : 'Connecting to the Quantilica agent…';
    await this.panel?.webview.postMessage({ type: 'down', message, canStart: state.kind === 'down', hours: this.hours });
  }
}

/** The GitHub sync's hibernation now (it holds no slot then), from the snapshot, beside the history. */
function withSync(
  history: StationHistory,
  session: AgentSession,
): StationHistory & { syncFetchers: string[]; hibernating: { runId: string | null; from: string; until: string } | null } {
  const snapshot = session.snapshot;
  const syncFetchers = (snapshot?.catalog ?? []).filter((e) => e.kind === 'github-sync').map((e) => e.name);
  const sync = snapshot?.sync;
  const hibernating = sync?.hibernatingUntil
    ? {
        runId: sync.runId,
        from: snapshot?.runs.find((r) => r.runId === sync.runId)?.enqueuedAt ?? history.to,
        until: sync.hibernatingUntil,
      }
    : null;
  return { ...history, syncFetchers, hibernating };
}

function html(webview: vscode.Webview, script: vscode.Uri, hours: number): string {
  const nonce = crypto.randomBytes(16).toString('base64');
  const csp = [
    "default-src 'none'",
    `img-src ${webview.cspSource} data:`,
    `style-src ${webview.cspSource} 'nonce-${nonce}'`,
    `script-src 'nonce-${nonce}'`,
    `font-src ${webview.cspSource}`,
  ].join('; ');
  const ranges = STATION_RANGES.map(
    (h) => `<button type="button" class="range" data-hours="${h}" aria-pressed="${h === hours}">${h} h</button>`,
  ).join('');
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>Quantilica Station</title>
<style nonce="${nonce}">
  body { color: var(--vscode-foreground); background: var(--vscode-editor-background); font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); padding: 0 16px 16px; }
  h2 { font-size: 1.1em; font-weight: 600; margin: 16px 0 6px; }
  .chart { position: relative; width: 100%; }
  #disk-box { height: 240px; }
  #updated { color: var(--vscode-descriptionForeground); }
  details { margin-top: 12px; color: var(--vscode-descriptionForeground); }
  #ranges { margin-top: 12px; }
  button { color: var(--vscode-button-secondaryForeground); background: var(--vscode-button-secondaryBackground); border: 1px solid var(--vscode-button-border, transparent); padding: 2px 10px; margin-right: 4px; cursor: pointer; }
  button[aria-pressed="true"], #start { color: var(--vscode-button-foreground); background: var(--vscode-button-background); }
  #down { margin-top: 16px; }
  [hidden] { display: none !important; }
</style>
</head>
<body>
  <div id="ranges" role="group" aria-label="Hours shown">${ranges}</div>
  <p id="updated">Loading the station's history…</p>
  <div id="down" hidden><p id="down-text"></p><button type="button" id="start">Start Agent</button></div>
  <div id="charts">
    <h2 id="timeline-title">Slots, last ${hours} hours</h2>
    <div class="chart"><canvas id="timeline" role="img" aria-label="Timeline of runs per slot, and of the GitHub sync's slot use; the list below has the same data"></canvas></div>
    <h2 id="disk-title">Free disk space, last ${hours} hours</h2>
    <div class="chart" id="disk-box"><canvas id="disk" role="img" aria-label="Free disk space with the warn, pause and resume thresholds"></canvas></div>
    <details><summary>Runs per slot (text)</summary><ul id="lane-list"></ul></details>
  </div>
  <script nonce="${nonce}" src="${webview.asWebviewUri(script).toString()}"></script>
</body>
</html>`;
}
