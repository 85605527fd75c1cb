import * as crypto from 'node:crypto';
import * as vscode from 'vscode';
import { GetHistory } from '../shared/protocol';
import type { AgentSession } from './agentSession';

/** What the webview reported after drawing (the tests check the DOM through this). */
export interface StationRendered {
  lanes: Array<{ lane: string; runs: number; fetchers: string }>;
  canvases: number;
  bars: number;
  diskPoints: number;
}

const REFRESH_MS = 60_000;

/**
 * The Station panel: a webview with the last 24 hours (slot timeline, free disk with thresholds)
 * from `quantilica/history`. Strict CSP: no remote resources, one script (the bundle in
 * dist/webview, chart.js inside) allowed by nonce, styles from the extension and by nonce.
 */
export class StationPanel implements vscode.Disposable {
  private panel: vscode.WebviewPanel | null = null;
  private timer: NodeJS.Timeout | null = null;
  private readonly renderedEmitter = new vscode.EventEmitter<StationRendered>();
  readonly onDidRender = this.renderedEmitter.event;
  lastRendered: StationRendered | null = null;
  private pending: NodeJS.Timeout | null = null;
  private readonly subscription: vscode.Disposable;

  constructor(private readonly extensionUri: vscode.Uri, private readonly session: AgentSession, private readonly log: vscode.LogOutputChannel) {
    // A run that starts or ends moves a bar: refresh soon, at most once every 2 s.
    this.subscription = session.onDidChange((event) => {
      if (!this.panel || (event.kind === 'change' && event.params.change.kind !== 'run')) return;
      if (!this.pending) this.pending = setTimeout(() => { this.pending = null; void this.refresh(); }, 2000);
    });
  }

  show(): void {
    if (this.panel) {
      this.panel.reveal();
      void this.refresh();
      return;
    }
    const root = vscode.Uri.joinPath(this.extensionUri, 'dist', 'webview');
    const panel = vscode.window.createWebviewPanel('quantilica.station', 'Quantilica Station', vscode.ViewColumn.Active, {
      enableScripts: true,
      localResourceRoots: [root],
      retainContextWhenHidden: false,
    });
    this.panel = panel;
    panel.iconPath = vscode.Uri.joinPath(this.extensionUri, 'media', 'icon.png');
    panel.webview.html = html(panel.webview, vscode.Uri.joinPath(root, 'station.js'));
    panel.webview.onDidReceiveMessage((message: { type: string } & Partial<StationRendered>) => {
      if (message.type === 'ready') void this.refresh();
      if (message.type === 'rendered') {
        this.lastRendered = { lanes: message.lanes ?? [], canvases: message.canvases ?? 0, bars: message.bars ?? 0, diskPoints: message.diskPoints ?? 0 };
        this.renderedEmitter.fire(this.lastRendered);
      }
    });
    panel.onDidDispose(() => {
      this.panel = null;
      if (this.timer) clearInterval(this.timer);
      this.timer = null;
    });
    this.timer = setInterval(() => void this.refresh(), REFRESH_MS);
  }

  async refresh(): Promise<void> {
    const panel = this.panel;
    if (!panel) return;
    try {
      const history = await this.session.client().sendRequest<GetHistory.Result>(GetHistory.method, { hours: 24 } satisfies GetHistory.Params);
      await panel.webview.postMessage({ type: 'history', history });
    } catch (err) {
      this.log.info(`station panel: no history (${err instanceof Error ? err.message : String(err)})`);
    }
  }

  dispose(): void {
    this.subscription.dispose();
    if (this.pending) clearTimeout(this.pending);
    this.panel?.dispose();
    this.renderedEmitter.dispose();
  }
}

function html(webview: vscode.Webview, script: vscode.Uri): string {
  const nonce = crypto.randomBytes(16).toString('base64');
  const csp = [
    "default-src 'none'",
    `img-src ${webview.cspSource} data:`,
    `style-src ${webview.cspSource} 'nonce-${nonce}'`,
    `script-src 'nonce-${nonce}'`,
    `font-src ${webview.cspSource}`,
  ].join('; ');
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
</style>
</head>
<body>
  <p id="updated">Loading the last 24 hours…</p>
  <h2>Slots, last 24 hours</h2>
  <div class="chart"><canvas id="timeline" role="img" aria-label="Timeline of runs per slot over the last 24 hours; the list below has the same data"></canvas></div>
  <h2>Free disk space, last 24 hours</h2>
  <div class="chart" id="disk-box"><canvas id="disk" role="img" aria-label="Free disk space over the last 24 hours with the warn, pause and resume thresholds"></canvas></div>
  <details><summary>Runs per slot (text)</summary><ul id="lane-list"></ul></details>
  <script nonce="${nonce}" src="${webview.asWebviewUri(script).toString()}"></script>
</body>
</html>`;
}
