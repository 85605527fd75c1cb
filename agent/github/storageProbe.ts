import type { GithubStore } from './store/githubStore';

/** The first probe of a lost storage comes this soon; each next one waits twice as long, up to the ceiling. */
export const STORAGE_PROBE_FIRST_MS = 1_000;
export const STORAGE_PROBE_MAX_MS = 30_000;

/**
 * How long to wait before probe number `attempt` (0-based): exponential from one second to 30 s, with
 * ±20 % jitter so that the syncs of several agents on one database do not probe it in step.
 */
export function storageProbeDelay(attempt: number, random: () => number = Math.random): number {
  const base = Math.min(STORAGE_PROBE_MAX_MS, STORAGE_PROBE_FIRST_MS * 2 ** Math.min(attempt, 16));
  return Math.round(base * (0.8 + 0.4 * random()));
}

/**
 * Whether the storage takes writes again: a write to the sync's own row (a read would succeed on a
 * full disk), or a read when the run has no sync row yet. Throws what the storage throws.
 */
export async function probeStorage(store: GithubStore, syncId: string | null): Promise<void> {
  if (syncId === null) await store.db.query('SELECT count(*) AS n FROM github.sync');
  else await store.db.query('UPDATE github.sync SET progress_at = progress_at WHERE id = $1', [syncId]);
}
