import * as fs from 'node:fs';

/** Replays a holdSlot log in monotonic-clock order: the most fetchers alive at once, and the counts. */
export function maxConcurrent(logFile: string): { max: number; starts: number; stops: number } {
  const text = fs.existsSync(logFile) ? fs.readFileSync(logFile, 'utf8').trim() : '';
  const events =
    text === ''
      ? []
      : text.split('\n').map((l) => {
          const [kind, ns] = l.split(' ');
          return { kind, at: BigInt(ns) };
        });
  // At equal timestamps count the stop first: the slot was free before the next start.
  events.sort((a, b) => (a.at === b.at ? (a.kind === 'stop' ? -1 : 1) : a.at < b.at ? -1 : 1));
  let now = 0;
  let max = 0;
  for (const e of events) {
    now += e.kind === 'start' ? 1 : -1;
    max = Math.max(max, now);
  }
  return { max, starts: events.filter((e) => e.kind === 'start').length, stops: events.filter((e) => e.kind === 'stop').length };
}
