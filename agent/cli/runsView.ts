import { reasonWords } from '../../shared/humanWords';
import type { RunInfo, RunStatus } from '../../shared/protocol';
import { ClientError } from '../errors';
import { ExitCode } from '../exitCodes';
import { runMemory } from './format';

const STATUSES: readonly RunStatus[] = ['waiting', 'running', 'completed', 'failed', 'cancelled', 'skipped'];

export interface RunsFilter { fetcher?: string; status?: RunStatus; since?: Date }

/** `--status`: one of the run states. */
export function parseStatus(value: string): RunStatus {
  if (!(STATUSES as readonly string[]).includes(value)) throw new ClientError(0, ExitCode.usage, `--status ${value}: allowed: ${STATUSES.join(', ')}`);
  return value as RunStatus;
}

/** `--since`: "30min", "2h", "3d", "45s" ago, or an ISO date/time. */
export function parseSince(value: string, now = Date.now()): Date {
  const rel = /^(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d)$/.exec(value.trim());
  if (rel) {
    const unit = { s: 1, sec: 1, m: 60, min: 60, h: 3600, d: 86400 }[rel[2] as 's' | 'sec' | 'm' | 'min' | 'h' | 'd'];
    return new Date(now - Number(rel[1]) * unit * 1000);
  }
  const at = Date.parse(value);
  if (Number.isNaN(at)) throw new ClientError(0, ExitCode.usage, `--since ${value}: allowed: a duration like 30min, 2h, 3d, or a date like 2026-11-30T08:00`);
  return new Date(at);
}

export function filterRuns(runs: RunInfo[], f: RunsFilter): RunInfo[] {
  return runs.filter((r) => (!f.fetcher || r.fetcher === f.fetcher)
    && (!f.status || r.status === f.status)
    && (!f.since || Date.parse(r.startedAt ?? r.enqueuedAt) >= f.since.getTime()));
}

/** "42 s", "3 min 5 s", "2 h 5 min", "3 d 4 h". */
export function humanDuration(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min${s % 60 ? ` ${s % 60} s` : ''}`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h${m % 60 ? ` ${m % 60} min` : ''}`;
  return `${Math.floor(h / 24)} d${h % 24 ? ` ${h % 24} h` : ''}`;
}

/** "5 min ago", "in 2 h 10 min". */
export function relativeTime(iso: string, now = Date.now()): string {
  const ms = Date.parse(iso) - now;
  if (Math.abs(ms) < 1000) return 'now';
  return ms < 0 ? `${humanDuration(-ms)} ago` : `in ${humanDuration(ms)}`;
}

/** Colour only on a terminal, and never with NO_COLOR set (https://no-color.org). */
export function useColour(stream: NodeJS.WriteStream = process.stdout, env: NodeJS.ProcessEnv = process.env): boolean {
  return stream.isTTY === true && (env.NO_COLOR === undefined || env.NO_COLOR === '') && env.TERM !== 'dumb';
}

const COLOURS: Record<RunStatus, string> = { waiting: '33', running: '36', completed: '32', failed: '31', cancelled: '35', skipped: '90' };

/** The human table of `quantilica runs`: relative start times, durations, status in colour on a terminal. */
export function formatRunsTable(runs: RunInfo[], colour: boolean, now = Date.now()): string {
  if (runs.length === 0) return 'no runs\n';
  const rows = runs.map((r) => [
    r.runId, r.fetcher, r.pool, r.status,
    r.exitCode === null ? (r.signal ?? '-') : String(r.exitCode),
    relativeTime(r.startedAt ?? r.enqueuedAt, now),
    r.startedAt ? humanDuration((r.finishedAt ? Date.parse(r.finishedAt) : now) - Date.parse(r.startedAt)) : '-',
    r.trigger,
    runMemory(r),
    reasonWords(r.reason),
  ]);
  const head = ['RUN', 'FETCHER', 'POOL', 'STATUS', 'EXIT', 'STARTED', 'DURATION', 'TRIGGER', 'MEM MB', 'REASON'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? '').length)));
  const line = (cells: string[], status?: RunStatus) => cells.map((c, i) => {
    const padded = c.padEnd(widths[i] ?? 0);
    return colour && status && i === 3 ? `\x1b[${COLOURS[status]}m${padded}\x1b[0m` : padded;
  }).join('  ').trimEnd();
  return `${[line(head), ...rows.map((row, i) => line(row, runs[i]?.status))].join('\n')}\n`;
}
