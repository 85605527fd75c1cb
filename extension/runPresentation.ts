import * as vscode from 'vscode';
import { clockTime, durationWords, endWords, gbWords, reasonWords, triggerWords } from '../shared/humanWords';
import type { RunInfo } from '../shared/protocol';
import { describeWait, elapsed } from './describe';

/**
 * A run that holds its slot and is being spawned: the agent reports it `waiting` with reason
 * `starting` until the fetcher's process exists. It waits for nothing, so it is not shown as waiting.
 */
export function isStarting(run: RunInfo): boolean {
  return run.status === 'waiting' && run.reason === 'starting';
}

/** Status icons with the colours VS Code's own test and chart views use, so they read the same. */
export function runIcon(run: RunInfo): vscode.ThemeIcon {
  if (isStarting(run)) return new vscode.ThemeIcon('loading~spin', new vscode.ThemeColor('charts.blue'));
  switch (run.status) {
    case 'running':
      return new vscode.ThemeIcon('sync~spin', new vscode.ThemeColor('charts.blue'));
    case 'waiting':
      return new vscode.ThemeIcon('clock', new vscode.ThemeColor('charts.yellow'));
    case 'completed':
      return new vscode.ThemeIcon('pass', new vscode.ThemeColor('testing.iconPassed'));
    case 'failed':
      return new vscode.ThemeIcon('error', new vscode.ThemeColor('testing.iconFailed'));
    case 'cancelled':
      return new vscode.ThemeIcon('circle-slash', new vscode.ThemeColor('charts.orange'));
    case 'skipped':
      return new vscode.ThemeIcon('debug-step-over', new vscode.ThemeColor('charts.purple'));
  }
}

/** "completed · exit 0", "failed · exit 3 · attempt 3 of 3", why a run waits, or how long it runs. */
export function outcome(run: RunInfo): string {
  if (isStarting(run)) return 'starting';
  if (run.status === 'waiting') return describeWait(run.wait, run);
  if (run.status === 'running')
    return [run.startedAt ? `running for ${elapsed(run.startedAt)}` : 'running', liveWords(run)].filter((p) => p !== '').join(' · ');
  return [run.status, endWords(run)].filter((p) => p !== '').join(' · ');
}

/** What a running run is under: "stalled since 14:05", "attempt 2 of 3", "time limit at 15:00". */
export function liveWords(run: RunInfo): string {
  const parts: string[] = [];
  if (run.stalledSince) parts.push(`stalled since ${clockTime(run.stalledSince)}`);
  if (run.attempts !== undefined && run.attempts > 1) parts.push(`attempt ${run.attempt ?? 1} of ${run.attempts}`);
  if (run.deadline) parts.push(`time limit at ${clockTime(run.deadline)}`);
  return parts.join(' · ');
}

/** "peak 0.04 GB" (with "sampled" when read from /proc rather than the run's cgroup); empty when unknown. */
export function peakMemory(run: RunInfo): string {
  if (run.peakMemoryMb === null || run.peakMemoryMb === undefined) return '';
  return `peak ${gbWords(run.peakMemoryMb / 1024)}${run.memorySource === 'sampled' ? ' (sampled)' : ''}`;
}

/** How long a run ran (or has been running); empty before it started. */
export function duration(run: RunInfo, now = Date.now()): string {
  if (!run.startedAt) return '';
  const end = run.finishedAt ? Date.parse(run.finishedAt) : now;
  return elapsed(run.startedAt, end);
}

/** A time in the user's locale and zone, with the zone named (tooltips never show UTC ISO strings). */
export function localTime(iso: string | null): string {
  if (!iso) return '—';
  const d = new Date(iso);
  return `${d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'medium' })} (${timeZone()})`;
}

export function timeZone(): string {
  return Intl.DateTimeFormat().resolvedOptions().timeZone;
}

/** Plain words for screen readers: no Markdown, no glyphs. */
export function spokenRun(run: RunInfo): string {
  const parts = [`${run.fetcher}, ${isStarting(run) ? 'starting' : run.status}`];
  if (run.status === 'running' && run.startedAt) parts.push(`for ${spokenDuration(run.startedAt)}`);
  else if (run.startedAt && run.finishedAt) parts.push(`after ${spokenDuration(run.startedAt, Date.parse(run.finishedAt))}`);
  if (run.status === 'waiting' && !isStarting(run)) parts.push(describeWait(run.wait, run).replace(/ · /g, ', '));
  if (run.exitCode !== null) parts.push(`exit code ${run.exitCode}`);
  if (run.reason && !isStarting(run) && run.reason !== 'exit-code' && run.reason !== run.status && run.status !== 'waiting')
    parts.push(reasonWords(run.reason));
  if (run.status === 'running' && liveWords(run)) parts.push(liveWords(run).replace(/ · /g, ', '));
  if (run.peakMemoryMb !== null && run.peakMemoryMb !== undefined)
    parts.push(`peak memory ${gbWords(run.peakMemoryMb / 1024).replace(' GB', ' gigabytes')}`);
  parts.push(`in pool ${run.pool}`);
  return parts.join(', ');
}

function spokenDuration(since: string, now = Date.now()): string {
  return durationWords((now - Date.parse(since)) / 1000)
    .replace(/\bmin\b/, 'minutes')
    .replace(/\bh\b/, 'hours');
}

/** The tooltip of a run row: fetcher first, times in local time, the technical details last. */
export function runTooltip(run: RunInfo): vscode.MarkdownString {
  const md = new vscode.MarkdownString(undefined, true);
  md.appendMarkdown(`**${escapeMd(run.fetcher)}** — ${escapeMd(outcome(run))}\n\n`);
  const rows: Array<[string, string]> = [
    ['Pool', run.pool + (run.slot !== null ? `, slot ${run.slot}` : '')],
    ['Trigger', triggerWords(run.trigger)],
    ['Queued', localTime(run.enqueuedAt)],
    ['Started', localTime(run.startedAt)],
    ['Finished', localTime(run.finishedAt)],
    ['Duration', duration(run) || '—'],
    ['Run id', run.runId],
  ];
  if (peakMemory(run))
    rows.push(['Memory', peakMemory(run) + (run.memoryLimitMb ? ` of a ${gbWords(run.memoryLimitMb / 1024)} ceiling` : '')]);
  if (run.pid !== null) rows.push(['Process', `pid ${run.pid}`]);
  if (run.reason) rows.push(['Reason', `${reasonWords(run.reason)} (${run.reason})`]);
  md.appendMarkdown(rows.map(([k, v]) => `${k}: ${escapeMd(v)}`).join('  \n'));
  return md;
}

export function escapeMd(text: string): string {
  return text.replace(/[\\`*_{}[\]()#+\-.!|<>]/g, '\\$&');
}
