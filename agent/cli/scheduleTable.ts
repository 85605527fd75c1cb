import type { ScheduleEntry, ScheduleStatus } from '../../shared/protocol';
import { relativeTime } from './runsView';

/** `LATE since 14:05 (12 min ago)` for a late entry, `ok` for one under a lateness check, `-` otherwise. */
export function lateText(e: ScheduleEntry, now = Date.now()): string {
  if (e.lateSince) return `LATE since ${new Date(e.lateSince).toLocaleString(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', day: '2-digit', month: '2-digit' })} (${relativeTime(e.lateSince, now)})`;
  return e.lateAfterMinutes != null ? 'ok' : '-';
}

/**
 * `quantilica schedule`, read like `systemctl list-timers`: NEXT, LEFT, LAST, PASSED, FETCHER, CRON,
 * and LATE when an entry has a lateness check (lateAfterMinutes).
 */
export function formatScheduleTable(schedule: ScheduleStatus | null, now = Date.now()): string {
  if (!schedule) return 'no schedule\n';
  const local = (iso: string) => new Date(iso).toLocaleString(undefined, { weekday: 'short', year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit', timeZoneName: 'short' });
  const entries = [...schedule.entries].sort((a, b) => (a.nextDue ?? '~').localeCompare(b.nextDue ?? '~'));
  const checked = entries.some((e) => e.lateAfterMinutes != null);
  const late = entries.filter((e) => e.lateSince).length;
  const rows = entries.map((e) => {
    const paused = e.paused || schedule.paused;
    return [
      paused ? 'paused' : e.nextDue ? local(e.nextDue) : '-',
      paused || !e.nextDue ? '-' : relativeTime(e.nextDue, now).replace(/^in /, ''),
      e.lastRunAt ? local(e.lastRunAt) : 'never',
      e.lastRunAt ? relativeTime(e.lastRunAt, now) : '-',
      e.fetcher,
      e.cron ? `${e.cron}${e.timezone ? ` (${e.timezone})` : ''}` : '-',
      ...(checked ? [lateText(e, now)] : []),
    ];
  });
  const head = ['NEXT', 'LEFT', 'LAST', 'PASSED', 'FETCHER', 'CRON', ...(checked ? ['LATE'] : [])];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join('  ').trimEnd();
  const due = entries.filter((e) => e.nextDue && !e.paused && !schedule.paused).length;
  return `${[line(head), ...rows.map(line)].join('\n')}\n\n${entries.length} fetchers listed, ${due} due${late > 0 ? `, ${late} LATE` : ''}${schedule.paused ? '; the whole schedule is PAUSED' : ''}; catch-up ${schedule.catchUp ? 'on' : 'off'}.\n`;
}

/** A one-line progress bar for a long flush on a terminal: `[########------------]  40%  400/1000`. */
export function progressBar(sent: number, remaining: number, width = 24): string {
  const total = sent + remaining;
  const fraction = total === 0 ? 1 : sent / total;
  const filled = Math.round(fraction * width);
  return `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${String(Math.floor(fraction * 100)).padStart(3)}%  ${sent}/${total}`;
}
