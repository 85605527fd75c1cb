import type { SimRun } from './simulatorData';

/** GitHub's cap on a filtered workflow-runs listing (actor, branch, created, event, head_sha, status…). */
export const RESULTS_CAP = 1000;

/** A `created` filter as GitHub's search syntax writes it: `>=X`, `>X`, `<=X`, `<X`, `A..B`, or a day. */
export interface CreatedFilter {
  from: number | null;
  fromInclusive: boolean;
  to: number | null;
  toInclusive: boolean;
}

const time = (text: string): number => Date.parse(/^\d{4}-\d{2}-\d{2}$/.test(text) ? `${text}T00:00:00Z` : text);

export function createdFilter(value: string): CreatedFilter | 'invalid' {
  const range = /^(.+)\.\.(.+)$/.exec(value);
  let f: CreatedFilter;
  if (range) f = { from: time(range[1]), fromInclusive: true, to: time(range[2]), toInclusive: true };
  else if (value.startsWith('>=')) f = { from: time(value.slice(2)), fromInclusive: true, to: null, toInclusive: true };
  else if (value.startsWith('>')) f = { from: time(value.slice(1)), fromInclusive: false, to: null, toInclusive: true };
  else if (value.startsWith('<=')) f = { from: null, fromInclusive: true, to: time(value.slice(2)), toInclusive: true };
  else if (value.startsWith('<')) f = { from: null, fromInclusive: true, to: time(value.slice(1)), toInclusive: false };
  else if (/^\d{4}-\d{2}-\d{2}$/.test(value)) f = { from: time(value), fromInclusive: true, to: time(value) + 86_399_999, toInclusive: true };
  else return 'invalid';
  if (Number.isNaN(f.from) || Number.isNaN(f.to)) return 'invalid';
  return f;
}

/** A repository's runs as the listing answers them: newest first, filtered by `created` and `status`. */
export function runsListing(runs: readonly SimRun[], created: CreatedFilter | null, status: string | null): { runs: SimRun[]; filtered: boolean } {
  const out = runs.filter((r) => {
    const t = Date.parse(r.created_at);
    if (created?.from != null && (created.fromInclusive ? t < created.from : t <= created.from)) return false;
    if (created?.to != null && (created.toInclusive ? t > created.to : t >= created.to)) return false;
    // status takes a status (queued, in_progress, completed…) or a conclusion (success, failure…).
    if (status !== null && r.status !== status && r.conclusion !== status) return false;
    return true;
  });
  out.sort((a, b) => (a.created_at === b.created_at ? b.id - a.id : a.created_at < b.created_at ? 1 : -1));
  return { runs: out, filtered: created !== null || status !== null };
}
