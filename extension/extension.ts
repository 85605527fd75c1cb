import * as os from 'node:os';
import * as path from 'node:path';
import * as vscode from 'vscode';
import { AgentLauncher } from './agentLauncher';
import { AgentSession, type SessionState } from './agentSession';
import { registerCommands, setRunsLookup } from './commands';
import { DISK_DETAILS_SCHEME, DiskDetailsDocument } from './diskDetailsDocument';
import { DiskStatusItem, gaugeState } from './diskStatusItem';
import { fetcherPickItems } from './fetcherPick';
import { Notices } from './notices';
import { watchEvents } from './operatorEvents';
import { PoolTreeProvider } from './poolTreeProvider';
import { quietLog } from './quietLog';
import { reportError } from './reportError';
import { RUN_LOG_SCHEME, RunLogDocuments } from './runLogDocuments';
import { RunsTreeProvider, type RunsFilter } from './runsTreeProvider';
import { registerSchedulePause } from './schedulePause';
import { ScheduleTreeProvider, type ScheduleNode } from './scheduleTreeProvider';
import { StationPanel } from './stationPanel';
import { TelemetryHealthItem } from './telemetryHealthItem';

/** What `activate` returns: the extension-host tests read the live state through it. */
export interface QuantilicaApi {
  readonly session: AgentSession;
  readonly tree: PoolTreeProvider;
  readonly runs: RunsTreeProvider;
  readonly schedule: ScheduleTreeProvider;
  /** The three tree views, created before the session starts connecting. */
  readonly views: {
    readonly pools: vscode.TreeView<unknown>;
    readonly runs: vscode.TreeView<unknown>;
    readonly schedule: vscode.TreeView<unknown>;
  };
  /** What `activate` did, in order ('views' before 'connect'). */
  readonly activationSteps: readonly string[];
  readonly disk: DiskStatusItem;
  readonly telemetry: TelemetryHealthItem;
  readonly station: StationPanel;
  readonly logs: RunLogDocuments;
  readonly notices: Notices;
  /** Context keys the extension set, as the when-clauses see them. */
  readonly contextKeys: ReadonlyMap<string, unknown>;
  /** The last lines written to the Quantilica output channel. */
  readonly outputLines: readonly string[];
  readonly fetcherPickItems: typeof fetcherPickItems;
  /** Milliseconds `activate` took. */
  readonly activationMs: number;
}

export function activate(context: vscode.ExtensionContext): QuantilicaApi | undefined {
  const started = Date.now();
  const activationSteps: string[] = [];
  const channel = vscode.window.createOutputChannel('Quantilica', { log: true });
  context.subscriptions.push(channel);
  const log = quietLog(channel);
  try {
    const contextKeys = new Map<string, unknown>();
    const setContext = (key: string, value: unknown) => {
      if (contextKeys.get(key) === value) return;
      contextKeys.set(key, value);
      void vscode.commands.executeCommand('setContext', key, value);
    };
    // The views first, before anything touches the agent: VS Code shows "There is no data provider
    // registered" for a view whose provider is not there when it asks (a window reload restores the
    // Quantilica container at once). Each view says "Connecting…" until the agent's state arrives.
    const session = new AgentSession(log, connectionFile);
    const tree = new PoolTreeProvider();
    const runs = new RunsTreeProvider(session, log);
    const schedule = new ScheduleTreeProvider();
    const view = vscode.window.createTreeView('quantilica.pools', { treeDataProvider: tree, showCollapseAll: true });
    const runsView = vscode.window.createTreeView('quantilica.runs', { treeDataProvider: runs });
    const scheduleView = vscode.window.createTreeView('quantilica.schedule', { treeDataProvider: schedule });
    const views = { pools: view, runs: runsView, schedule: scheduleView };
    const showState = (state: SessionState) => {
      for (const v of Object.values(views)) v.message = viewMessage(state);
    };
    showState(session.state);
    activationSteps.push('views');
    const notices = new Notices();
    const disk = new DiskStatusItem();
    const telemetry = new TelemetryHealthItem();
    const logs = new RunLogDocuments(session, log);
    const diskDetails = new DiskDetailsDocument(session);
    const launcher = new AgentLauncher(context, session, log, notices);
    const station = new StationPanel(context.extensionUri, session, log);
    setRunsLookup(
      (runId) => runs.run(runId),
      () => runs.allRuns(),
    );
    context.subscriptions.push(
      session,
      tree,
      runs,
      schedule,
      disk,
      telemetry,
      logs,
      diskDetails,
      station,
      view,
      runsView,
      scheduleView,
      ...registerCommands(session, launcher, log, notices, logs),
    );
    context.subscriptions.push(
      vscode.workspace.registerTextDocumentContentProvider(RUN_LOG_SCHEME, logs),
      vscode.workspace.registerTextDocumentContentProvider(DISK_DETAILS_SCHEME, diskDetails),
      ...registerViewCommands(session, runs),
      ...registerSchedulePause(session, notices, log),
      watchEvents(session, notices, launcher),
      vscode.commands.registerCommand('quantilica.openStation', () => station.show()),
      vscode.window.registerWebviewPanelSerializer(StationPanel.viewType, station),
    );

    const renderGauge = () => {
      disk.set(gaugeState(session.state, session.snapshot?.disk, session.snapshot?.spool));
      telemetry.set(session.snapshot?.spool ?? null);
      diskDetails.changed();
      const database = session.snapshot?.spool?.database;
      setContext('quantilica.hasDatabase', database !== undefined && database !== 'not-configured');
    };
    const describeFilter = (f: RunsFilter) => {
      runsView.description = [f.fetcher, f.status].filter((p) => p !== undefined).join(' · ') || undefined;
      setContext('quantilica.runsFiltered', f.fetcher !== undefined || f.status !== undefined);
    };
    // A whole-schedule pause is said in the view's header (with Resume there), not on each row.
    const describeSchedule = () => {
      const paused = session.state.kind === 'connected' && (session.snapshot?.schedule?.paused ?? false);
      scheduleView.description = paused ? 'the whole schedule is paused' : undefined;
      setContext('quantilica.schedulePaused', paused);
    };
    context.subscriptions.push(
      runs.onDidChangeFilter(describeFilter),
      // The filter's "matched nothing" welcome (with Clear) replaces "No runs yet" when runs exist.
      runs.onDidChangeTreeData(() => setContext('quantilica.runsFilterEmpty', runs.filterMatchesNothing)),
      schedule.onDidChangeTreeData(describeSchedule),
      session.onDidChange((event) => {
        tree.update(event);
        runs.update(event);
        schedule.update(event);
        if (event.kind === 'reset' || event.params.change.kind === 'disk' || event.params.change.kind === 'spool') renderGauge();
      }),
      session.onDidChangeState((state) => {
        setContext('quantilica.agentState', state.kind);
        showState(state);
        renderGauge();
        describeSchedule();
      }),
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (e.affectsConfiguration('quantilica.connectionFile')) session.reconnectNow();
      }),
    );
    setContext('quantilica.agentState', 'connecting');
    setContext('quantilica.hasDatabase', false);
    session.start();
    activationSteps.push('connect');

    if (vscode.workspace.getConfiguration('quantilica').get<boolean>('autoStart', false)) {
      // Give an agent that is already running the first word; start ours only if none answers.
      session.whenConnected(3000).catch(() => launcher.start());
    }
    return {
      session,
      tree,
      runs,
      schedule,
      views,
      activationSteps,
      disk,
      telemetry,
      station,
      logs,
      notices,
      contextKeys,
      get outputLines() {
        return log.lines;
      },
      fetcherPickItems,
      activationMs: Date.now() - started,
    };
  } catch (err) {
    reportError(log, 'Quantilica: the extension failed to start.', err);
    return undefined;
  }
}

export function deactivate(): void {
  // Everything is in context.subscriptions; the agent itself keeps running, it is the user's.
}

/** Commands of the Runs view and Run Now of the Schedule view. */
function registerViewCommands(session: AgentSession, runs: RunsTreeProvider): vscode.Disposable[] {
  return [
    vscode.commands.registerCommand('quantilica.runNow', (node?: ScheduleNode | string) =>
      vscode.commands.executeCommand('quantilica.runFetcher', typeof node === 'string' ? node : node?.fetcher),
    ),
    vscode.commands.registerCommand('quantilica.filterRuns', async (filter?: RunsFilter) => {
      if (filter) {
        runs.setFilter(filter);
        return runs.currentFilter;
      }
      const snapshot = session.snapshot;
      const fetchers = [...new Set((snapshot?.catalog ?? []).map((e) => e.name))];
      const fetcher = await vscode.window.showQuickPick(['(any fetcher)', ...fetchers], { placeHolder: 'Show the runs of which fetcher?' });
      if (fetcher === undefined) return runs.currentFilter;
      const status = await vscode.window.showQuickPick(
        ['(any status)', 'running', 'waiting', 'completed', 'failed', 'cancelled', 'skipped'],
        { placeHolder: 'With which outcome?' },
      );
      if (status === undefined) return runs.currentFilter;
      runs.setFilter({
        fetcher: fetcher === '(any fetcher)' ? undefined : fetcher,
        status: status === '(any status)' ? undefined : (status as RunsFilter['status']),
      });
      return runs.currentFilter;
    }),
    vscode.commands.registerCommand('quantilica.clearRunsFilter', () => runs.setFilter({})),
  ];
}

/** The message over every view: "Connecting…" until the first answer; the welcome views take over when down. */
export function viewMessage(state: SessionState): string | undefined {
  return state.kind === 'connecting' ? 'Connecting to the Quantilica agent…' : undefined;
}

/**
 * Where the agent's port and token are: the setting, else what the agent itself would use
 * (QUANTILICA_CONNECTION_FILE, QUANTILICA_HOME/agent.json, ~/.quantilica/agent.json).
 */
function connectionFile(): string {
  const home = process.env.HOME && process.env.HOME.length > 0 ? process.env.HOME : os.homedir();
  const expand = (p: string) => (p === '~' ? home : p.startsWith('~/') ? path.join(home, p.slice(2)) : p);
  const configured = vscode.workspace.getConfiguration('quantilica').get<string>('connectionFile', '').trim();
  if (configured) return expand(configured);
  if (process.env.QUANTILICA_CONNECTION_FILE) return expand(process.env.QUANTILICA_CONNECTION_FILE);
  if (process.env.QUANTILICA_HOME) return path.join(expand(process.env.QUANTILICA_HOME), 'agent.json');
  return path.join(home, '.quantilica', 'agent.json');
}
