import { RUN_STATUSES, type RunInfo, type RunStatus } from '../../shared/protocol';
import { ClientError } from '../errors';
import { ExitCode } from '../exitCodes';
import { reasonCell, runMemory, withPolicy } from './format';
import { humanDuration, moment } from './timeText';

export interface RunsFilter {
  fetcher?: string;
  status?: RunStatus;
  since?: Date;
}

/** `--status`: one of the run states. */
export function parseStatus(value: string): RunStatus {
  if (!(RUN_STATUSES as readonly string[]).includes(value))
    throw new ClientError(0, ExitCode.usage, `--status ${value}: allowed: ${RUN_STATUSES.join(', ')}`);
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
  if (Number.isNaN(at))
    throw new ClientError(0, ExitCode.usage, `--since ${value}: allowed: a duration like 30min, 2h, 3d, or a date like 2026-11-30T08:00`);
  return new Date(at);
}

export function filterRuns(runs: RunInfo[], f: RunsFilter): RunInfo[] {
  return runs.filter(
    (r) =>
      (!f.fetcher || r.fetcher === f.fetcher) &&
      (!f.status || r.status === f.status) &&
      (!f.since || Date.parse(r.startedAt ?? r.enqueuedAt) >= f.since.getTime()),
  );
}

/** Colour only on a terminal, and never with NO_COLOR set (https://no-color.org). */
export function useColour(stream: NodeJS.WriteStream = process.stdout, env: NodeJS.ProcessEnv = process.env): boolean {
  return stream.isTTY === true && (env.NO_COLOR === undefined || env.NO_COLOR === '') && env.TERM !== 'dumb';
}

const COLOURS: Record<RunStatus, string> = { waiting: '33', running: '36', completed: '32', failed: '31', cancelled: '35', skipped: '90' };

/** The human table of `quantilica runs`: start times (local, with the zone), durations, status in colour on a terminal. */
export function formatRunsTable(runs: RunInfo[], colour: boolean, now = Date.now()): string {
  if (runs.length === 0) return 'no runs\n';
  const rows = runs.map((r) => [
    r.runId,
    r.fetcher,
    r.pool,
    r.status,
    r.exitCode === null ? (r.signal ?? '-') : String(r.exitCode),
    moment(r.startedAt ?? r.enqueuedAt),
    r.startedAt ? humanDuration((r.finishedAt ? Date.parse(r.finishedAt) : now) - Date.parse(r.startedAt)) : '-',
    r.trigger,
    runMemory(r),
    withPolicy(r, reasonCell(r, null)),
  ]);
  const head = ['RUN', 'FETCHER', 'POOL', 'STATUS', 'EXIT', 'STARTED', 'DURATION', 'TRIGGER', 'MEM MB', 'REASON'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? '').length)));
  const line = (cells: string[], status?: RunStatus) =>
    cells
      .map((c, i) => {
        const padded = c.padEnd(widths[i] ?? 0);
        return colour && status && i === 3 ? `\x1b[${COLOURS[status]}m${padded}\x1b[0m` : padded;
      })
      .join('  ')
      .trimEnd();
  return `${[line(head), ...rows.map((row, i) => line(row, runs[i]?.status))].join('\n')}\n`;
}
