import type { Cron } from 'croner';

const MINUTE = 60_000;
/** Far enough back for any sensible pattern, including a yearly one on 29 February. */
const LOOKBACK_LIMIT = 5 * 366 * 24 * 60 * MINUTE;

/**
 * The gap between the occurrence at or before `now` and the one after it: the fetcher's period
 * where it matters now (a 6-hourly pattern gives 6 h; DST makes a daily one 23 or 25 h). Null
 * when the pattern has no occurrence on one side. croner 9 has no "previous occurrence", so this
 * searches backwards in growing windows; a handful of `nextRun` calls for ordinary patterns.
 */
export function cronPeriod(cron: Cron, now: Date): number | null {
  const next = cron.nextRun(now);
  const prev = previousRun(cron, now);
  if (next === null || prev === null) return null;
  return next.getTime() - prev.getTime();
}

export function previousRun(cron: Cron, now: Date): Date | null {
  for (let span = MINUTE; ; span *= 4) {
    let t = cron.nextRun(new Date(now.getTime() - span));
    if (t !== null && t.getTime() <= now.getTime()) {
      for (let n = cron.nextRun(t); n !== null && n.getTime() <= now.getTime(); n = cron.nextRun(n)) t = n;
      return t;
    }
    if (span >= LOOKBACK_LIMIT) return null;
  }
}
