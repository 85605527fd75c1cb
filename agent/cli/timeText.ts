/**
 * The CLI's one way to show time. A moment is local time with its zone (`2026-12-01 15:15 -03`,
 * `2026-12-01 18:15 UTC`): the zone is that of the moment itself, so a date across a DST change
 * says its own offset. A span is `42 s`, `3 min 5 s`, `2 h 5 min`, `3 d 4 h`; it stands without
 * "ago"/"in" where its column or label already says which way it points (AGO, IN).
 */
export function moment(at: string | number | Date): string {
  const d = at instanceof Date ? at : new Date(at);
  if (Number.isNaN(d.getTime())) return String(at);
  const two = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${two(d.getHours())}:${two(d.getMinutes())} ${zoneOf(d)}`;
}

/** `UTC`, `-03`, `+05:30`: the local zone's offset at that moment. */
export function zoneOf(d: Date): string {
  const east = -d.getTimezoneOffset();
  if (east === 0) return 'UTC';
  const abs = Math.abs(east);
  const minutes = abs % 60;
  return `${east < 0 ? '-' : '+'}${String(Math.floor(abs / 60)).padStart(2, '0')}${minutes ? `:${String(minutes).padStart(2, '0')}` : ''}`;
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

/** How long ago a past moment was (for an AGO column): `5 min`; `-` for a moment still ahead. */
export function spanSince(at: string, now = Date.now()): string {
  const ms = now - Date.parse(at);
  return ms < 0 ? '-' : humanDuration(ms);
}

/** How long until a moment ahead (for an IN column): `2 h 10 min`; `now` once it has come. */
export function spanUntil(at: string, now = Date.now()): string {
  const ms = Date.parse(at) - now;
  return ms < 1000 ? 'now' : humanDuration(ms);
}
