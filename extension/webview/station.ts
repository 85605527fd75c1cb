// The Station panel (runs in the webview): a timeline of the last 1, 6 or 24 hours with one lane per
// slot and a bar per run coloured by outcome, a lane for the GitHub sync (its working spans hold a
// slot, its hibernation none), and free disk space over the same hours with the gate's thresholds.
// chart.js draws on canvas, bundled into this file; colours come from the theme's CSS variables.
import {
  BarController,
  BarElement,
  CategoryScale,
  Chart,
  Legend,
  LinearScale,
  LineController,
  LineElement,
  PointElement,
  Tooltip,
  type ChartDataset,
  type TooltipItem,
} from 'chart.js';
import type { RunSpan, StationHistory } from '../../shared/protocol';

Chart.register(BarController, BarElement, CategoryScale, LinearScale, LineController, LineElement, PointElement, Tooltip, Legend);

interface VsCodeApi {
  postMessage(message: unknown): void;
  setState(state: unknown): void;
  getState(): unknown;
}
declare function acquireVsCodeApi(): VsCodeApi;
const vscode = acquireVsCodeApi();

type Bar = { x: [number, number]; y: string; run: RunSpan };
type History = StationHistory & { syncFetchers?: string[]; hibernating?: { runId: string | null; from: string; until: string } | null };
const SYNC_LANE = 'GitHub sync (slot use)';
let hours = Number((vscode.getState() as { hours?: number } | undefined)?.hours ?? 0) || 24;
let timeline: Chart<'bar', Bar[], string> | null = null;
let diskChart: Chart<'line', Array<{ x: number; y: number }>> | null = null;

function cssVar(name: string, fallback: string): string {
  return getComputedStyle(document.body).getPropertyValue(name).trim() || fallback;
}

const OUTCOMES: Array<{ key: string; label: string; match: (r: RunSpan) => boolean; colour: () => string }> = [
  {
    key: 'completed',
    label: 'completed',
    match: (r) => r.status === 'completed',
    colour: () => cssVar('--vscode-testing-iconPassed', '#388a34'),
  },
  { key: 'failed', label: 'failed', match: (r) => r.status === 'failed', colour: () => cssVar('--vscode-testing-iconFailed', '#e51400') },
  {
    key: 'cancelled',
    label: 'cancelled',
    match: (r) => r.status === 'cancelled' || r.status === 'skipped',
    colour: () => cssVar('--vscode-charts-orange', '#d18616'),
  },
  {
    key: 'running',
    label: 'running',
    match: (r) => r.status === 'running' || r.status === 'waiting',
    colour: () => cssVar('--vscode-charts-blue', '#1a85ff'),
  },
];

function time(ms: number): string {
  return new Date(ms).toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' });
}

function laneOf(pool: string, slot: number): string {
  return `${pool} · slot ${slot}`;
}

function ranges(): Array<{ label: string; pressed: boolean }> {
  return [...document.querySelectorAll<HTMLButtonElement>('button.range')].map((b) => {
    b.setAttribute('aria-pressed', String(Number(b.dataset.hours) === hours));
    return { label: b.textContent ?? '', pressed: Number(b.dataset.hours) === hours };
  });
}

function showDown(message: string, canStart: boolean): void {
  timeline?.destroy();
  diskChart?.destroy();
  timeline = null;
  diskChart = null;
  document.getElementById('charts')!.hidden = true;
  document.getElementById('down')!.hidden = false;
  document.getElementById('down-text')!.textContent = message;
  document.getElementById('start')!.hidden = !canStart;
  document.getElementById('updated')!.textContent = '';
  vscode.postMessage({
    type: 'rendered',
    lanes: [],
    canvases: 0,
    bars: 0,
    diskPoints: 0,
    hours,
    sync: { spans: 0, hibernating: false },
    down: message,
    canStart,
    ranges: ranges(),
  });
}

function render(h: History): void {
  document.getElementById('charts')!.hidden = false;
  document.getElementById('down')!.hidden = true;
  document.getElementById('timeline-title')!.textContent = `Slots, last ${hours === 1 ? 'hour' : `${hours} hours`}`;
  document.getElementById('disk-title')!.textContent = `Free disk space, last ${hours === 1 ? 'hour' : `${hours} hours`}`;
  const fromMs = Date.parse(h.from);
  const toMs = Date.parse(h.to);
  const lanes: string[] = [];
  for (const pool of h.pools) for (let i = 0; i < pool.size; i++) lanes.push(laneOf(pool.name, i));
  const spans = h.runs.filter((r) => r.slot !== null);
  // The sync's own lane: when it worked (holding a slot) and, now, when it hibernates (holding none).
  const syncNames = new Set(h.syncFetchers ?? []);
  const syncSpans = h.runs.filter((r) => syncNames.has(r.fetcher));
  const syncBars: Bar[] = syncSpans.map((r) => {
    const workedUntil =
      h.hibernating && h.hibernating.runId === r.runId ? Date.parse(h.hibernating.from) : r.end ? Date.parse(r.end) : toMs;
    return {
      x: [Math.max(fromMs, Date.parse(r.start)), Math.max(Date.parse(r.start), workedUntil)] as [number, number],
      y: SYNC_LANE,
      run: r,
    };
  });
  const hibernationBars: Bar[] =
    h.hibernating && syncSpans.length > 0
      ? [
          {
            x: [Math.max(fromMs, Date.parse(h.hibernating.from)), toMs] as [number, number],
            y: SYNC_LANE,
            run: syncSpans.find((r) => r.runId === h.hibernating!.runId) ?? syncSpans[0],
          },
        ]
      : [];
  for (const r of spans) if (!lanes.includes(laneOf(r.pool, r.slot ?? 0))) lanes.push(laneOf(r.pool, r.slot ?? 0));
  const fg = cssVar('--vscode-foreground', '#ccc');
  const grid = cssVar('--vscode-charts-lines', 'rgba(128,128,128,0.3)');

  const datasets: Array<ChartDataset<'bar', Bar[]>> = OUTCOMES.map((o) => ({
    label: o.label,
    data: spans.filter(o.match).map((r) => ({
      x: [Math.max(fromMs, Date.parse(r.start)), r.end ? Date.parse(r.end) : toMs] as [number, number],
      y: laneOf(r.pool, r.slot ?? 0),
      run: r,
    })),
    backgroundColor: o.colour(),
    borderColor: o.colour(),
    borderSkipped: false,
    minBarLength: 3,
    grouped: false,
    barPercentage: 0.7,
  }));
  const syncSets: Array<ChartDataset<'bar', Bar[]>> =
    syncSpans.length === 0
      ? []
      : [
          {
            label: 'GitHub sync working (holds a slot)',
            data: syncBars,
            backgroundColor: cssVar('--vscode-charts-purple', '#b180d7'),
            borderSkipped: false,
            minBarLength: 3,
            grouped: false,
            barPercentage: 0.7,
          },
          {
            label: 'GitHub sync hibernating (no slot)',
            data: hibernationBars,
            backgroundColor: 'transparent',
            borderColor: cssVar('--vscode-charts-purple', '#b180d7'),
            borderWidth: 1,
            borderSkipped: false,
            minBarLength: 3,
            grouped: false,
            barPercentage: 0.7,
          },
        ];
  const allLanes = syncSpans.length === 0 ? lanes : [...lanes, SYNC_LANE];
  const step = hours <= 1 ? 600_000 : hours <= 6 ? 3600_000 : 3600_000 * 2;
  timeline?.destroy();
  const timelineCanvas = document.getElementById('timeline') as HTMLCanvasElement;
  timelineCanvas.parentElement!.style.height = `${Math.max(160, allLanes.length * 22 + 70)}px`;
  timeline = new Chart<'bar', Bar[], string>(timelineCanvas, {
    type: 'bar',
    data: { labels: allLanes, datasets: [...datasets, ...syncSets] },
    options: {
      indexAxis: 'y',
      animation: false,
      maintainAspectRatio: false,
      parsing: { xAxisKey: 'x', yAxisKey: 'y' },
      scales: {
        x: {
          type: 'linear',
          min: fromMs,
          max: toMs,
          ticks: { color: fg, callback: (v) => time(Number(v)), stepSize: step },
          grid: { color: grid },
        },
        y: { type: 'category', ticks: { color: fg }, grid: { color: grid } },
      },
      plugins: {
        legend: { labels: { color: fg } },
        tooltip: {
          callbacks: {
            title: (items: Array<TooltipItem<'bar'>>) => (items[0]?.raw as Bar | undefined)?.run.fetcher ?? '',
            label: (item: TooltipItem<'bar'>) => {
              const r = (item.raw as Bar).run;
              const how = r.exitCode !== null ? `exit ${r.exitCode}` : (r.reason ?? '');
              return `${r.status}${how ? ` (${how})` : ''}: ${time(Date.parse(r.start))}–${r.end ? time(Date.parse(r.end)) : 'now'}, ${laneOf(r.pool, r.slot ?? 0)}`;
            },
          },
        },
      },
    },
  });

  const warnColour = cssVar('--vscode-charts-yellow', '#cca700');
  const pauseColour = cssVar('--vscode-charts-red', '#f14c4c');
  const resumeColour = cssVar('--vscode-charts-green', '#89d185');
  // A threshold as a flat dashed line across the chart's time range.
  const threshold = (name: string, gb: number, colour: string, dash: number[]): ChartDataset<'line', Array<{ x: number; y: number }>> => ({
    label: `${name} ${gb} GB`,
    data: [
      { x: fromMs, y: gb },
      { x: toMs, y: gb },
    ],
    borderColor: colour,
    borderDash: dash,
    pointRadius: 0,
    borderWidth: 1,
  });
  const diskSets: Array<ChartDataset<'line', Array<{ x: number; y: number }>>> = [
    {
      label: 'free GB',
      data: h.disk.filter((s) => s.freeGb !== null).map((s) => ({ x: Date.parse(s.at), y: s.freeGb ?? 0 })),
      borderColor: cssVar('--vscode-charts-blue', '#1a85ff'),
      pointRadius: 0,
      borderWidth: 2,
    },
  ];
  if (h.thresholds) {
    diskSets.push(
      threshold('warn', h.thresholds.warnGb, warnColour, [6, 4]),
      threshold('pause', h.thresholds.pauseGb, pauseColour, [6, 4]),
      threshold('resume', h.thresholds.resumeGb, resumeColour, [2, 3]),
    );
  }
  diskChart?.destroy();
  diskChart = new Chart<'line', Array<{ x: number; y: number }>>(document.getElementById('disk') as HTMLCanvasElement, {
    type: 'line',
    data: { datasets: diskSets },
    options: {
      animation: false,
      maintainAspectRatio: false,
      scales: {
        x: {
          type: 'linear',
          min: fromMs,
          max: toMs,
          ticks: { color: fg, callback: (v) => time(Number(v)), stepSize: step },
          grid: { color: grid },
        },
        y: { ticks: { color: fg }, grid: { color: grid }, title: { display: true, text: 'GB free', color: fg } },
      },
      plugins: { legend: { labels: { color: fg } } },
    },
  });

  // The same data as text: for screen readers, and what the tests read back from the DOM.
  const list = document.getElementById('lane-list')!;
  list.replaceChildren(
    ...lanes.map((lane) => {
      const runs = spans.filter((r) => laneOf(r.pool, r.slot ?? 0) === lane);
      const li = document.createElement('li');
      li.dataset.lane = lane;
      li.dataset.runs = String(runs.length);
      li.dataset.fetchers = [...new Set(runs.map((r) => r.fetcher))].join(',');
      li.textContent =
        runs.length === 0
          ? `${lane}: no run`
          : `${lane}: ${runs.map((r) => `${r.fetcher} ${r.status} ${time(Date.parse(r.start))}–${r.end ? time(Date.parse(r.end)) : 'now'}`).join('; ')}`;
      return li;
    }),
  );
  if (syncSpans.length > 0) {
    const li = document.createElement('li');
    li.dataset.syncLane = 'true';
    li.textContent = `${SYNC_LANE}: ${syncBars.map((b) => `${b.run.fetcher} worked ${time(b.x[0])}–${time(b.x[1])}`).join('; ')}${hibernationBars.length > 0 ? `; hibernating (no slot) since ${time(hibernationBars[0].x[0])}, until ${time(Date.parse(h.hibernating!.until))}` : ''}`;
    list.append(li);
  }
  const when = (ms: number) => new Date(ms).toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' });
  document.getElementById('updated')!.textContent =
    `${when(fromMs)} – ${when(toMs)} (${Intl.DateTimeFormat().resolvedOptions().timeZone}), ${h.disk.length} disk samples, ${spans.length} runs`;
  vscode.postMessage({
    type: 'rendered',
    hours,
    sync: { spans: syncBars.length, hibernating: hibernationBars.length > 0 },
    down: null,
    canStart: false,
    ranges: ranges(),
    lanes: [...list.querySelectorAll<HTMLLIElement>('li[data-lane]')].map((li) => ({
      lane: li.dataset.lane,
      runs: Number(li.dataset.runs),
      fetchers: li.dataset.fetchers,
    })),
    canvases: document.querySelectorAll('canvas').length,
    bars: datasets.reduce((n, d) => n + d.data.length, 0),
    diskPoints: diskSets[0]?.data.length ?? 0,
  });
}

window.addEventListener(
  'message',
  (event: MessageEvent<{ type: string; history?: History; hours?: number; message?: string; canStart?: boolean }>) => {
    if (event.data.hours) {
      hours = event.data.hours;
      vscode.setState({ hours });
    }
    if (event.data.type === 'history' && event.data.history) render(event.data.history);
    if (event.data.type === 'down') showDown(event.data.message ?? 'The agent is not running.', event.data.canStart ?? false);
  },
);
for (const button of document.querySelectorAll<HTMLButtonElement>('button.range')) {
  button.addEventListener('click', () => {
    hours = Number(button.dataset.hours);
    vscode.setState({ hours });
    ranges();
    vscode.postMessage({ type: 'range', hours });
  });
}
document.getElementById('start')!.addEventListener('click', () => vscode.postMessage({ type: 'startAgent' }));
vscode.postMessage({ type: 'ready' });
