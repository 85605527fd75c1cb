import type { ScheduleEntry, ScheduleStatus } from '../../shared/protocol';
import { moment, spanSince, spanUntil } from './timeText';

/** `LATE since 2026-12-01 14:05 UTC (12 min ago)` for a late entry, `ok` for one under a lateness check, `-` otherwise. */
export function lateText(e: ScheduleEntry, now = Date.now()): string {
  if (e.lateSince) return `LATE since ${moment(e.lateSince)} (${spanSince(e.lateSince, now)} ago)`;
  return e.lateAfterMinutes != null ? 'ok' : '-';
}

/**
 * `quantilica schedule`, read like `systemctl list-timers`: when each fetcher runs next and how soon
 * (IN), when it last started and how long ago (AGO), and LATE when an entry has a lateness check
 * (lateAfterMinutes). A footer counts what will run and what will not.
 */
export function formatScheduleTable(schedule: ScheduleStatus | null, now = Date.now()): string {
  if (!schedule) return 'no schedule\n';
  const entries = [...schedule.entries].sort((a, b) => (a.nextDue ?? '~').localeCompare(b.nextDue ?? '~'));
  const checked = entries.some((e) => e.lateAfterMinutes != null);
  const late = entries.filter((e) => e.lateSince).length;
  const rows = entries.map((e) => {
    const paused = e.paused || schedule.paused;
    return [
      paused ? 'paused' : e.nextDue ? moment(e.nextDue) : e.cron ? '-' : 'not scheduled',
      paused || !e.nextDue ? '-' : spanUntil(e.nextDue, now),
      e.lastRunAt ? moment(e.lastRunAt) : 'never',
      e.lastRunAt ? spanSince(e.lastRunAt, now) : '-',
      e.fetcher,
      e.cron ? `${e.cron}${e.timezone ? ` (${e.timezone})` : ''}` : '-',
      ...(checked ? [lateText(e, now)] : []),
    ];
  });
  const head = ['NEXT', 'IN', 'LAST', 'AGO', 'FETCHER', 'CRON', ...(checked ? ['LATE'] : [])];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  const unscheduled = entries.filter((e) => !e.cron).length;
  const paused = schedule.paused ? entries.length - unscheduled : entries.filter((e) => e.cron && e.paused).length;
  const scheduled = entries.length - unscheduled - paused;
  const counts = [
    `${scheduled} will run at their NEXT time`,
    late > 0 ? `${late} LATE (no completed run in time)` : '',
    paused > 0 ? `${paused} paused${schedule.paused ? ' (the whole schedule is PAUSED)' : ''}` : '',
    unscheduled > 0 ? `${unscheduled} without a schedule (run by hand only)` : '',
  ].filter((c) => c !== '');
  const catchUp = schedule.catchUp
    ? 'catch-up on: at start, a fetcher whose last run is older than its period runs once'
    : 'catch-up off: times missed while no agent ran are skipped';
  return `${[line(head), ...rows.map(line)].join('\n')}\n\n${entries.length} fetcher${entries.length === 1 ? '' : 's'}: ${counts.join(', ')}; ${catchUp}.\n`;
}

/** A one-line progress bar for a long flush on a terminal: `[########------------]  40%  400/1000`. */
export function progressBar(sent: number, remaining: number, width = 24): string {
  const total = sent + remaining;
  const fraction = total === 0 ? 1 : sent / total;
  const filled = Math.round(fraction * width);
  return `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${String(Math.floor(fraction * 100)).padStart(3)}%  ${sent}/${total}`;
}
