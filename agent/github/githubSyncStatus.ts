import { STAGES, type Budget, type Counters, type GithubStore, type Stage, type SyncRow, type SyncStatus } from './store/githubStore';

export interface StageProgress {
  done: number;
  notReached: number;
  total: number;
  notReachedRepos: Array<{ repo: string; reason: string }>;
}

/** What `quantilica github status` shows, and the sync's summary. Never holds the token. */
export interface GithubSyncStatus {
  syncId: string;
  status: SyncStatus;
  reason: string | null;
  startedAt: string;
  finishedAt: string | null;
  counters: Counters;
  stages: Record<Stage, StageProgress>;
  /** Set while the sync hibernates: when it wakes, and which budget it waits for. */
  hibernatingUntil: string | null;
  budget: Budget | null;
  quota: Partial<Record<Budget, { remaining: number; limit: number; resetAt: string }>>;
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

export async function githubSyncStatus(store: GithubStore, sync: SyncRow | string): Promise<GithubSyncStatus | null> {
  const row = typeof sync === 'string' ? await store.getSync(sync) : sync;
  if (row === null) return null;
  const checkpoints = await store.checkpoints(row.id);
  const stages = Object.fromEntries(
    STAGES.map((stage) => {
      const of = checkpoints.filter((c) => c.stage === stage);
      const missed = of.filter((c) => c.state === 'not-reached');
      return [
        stage,
        {
          done: of.filter((c) => c.state === 'done').length,
          notReached: missed.length,
          total: row.repos.length,
          notReachedRepos: missed.map((c) => ({ repo: c.repo, reason: c.reason ?? 'unknown' })),
        },
      ];
    }),
  ) as Record<Stage, StageProgress>;
  const quota: GithubSyncStatus['quota'] = {};
  for (const [budget, q] of Object.entries(row.quota) as Array<[Budget, { remaining: number; limit: number; resetAt: number }]>) {
    quota[budget] = { remaining: q.remaining, limit: q.limit, resetAt: new Date(q.resetAt).toISOString() };
  }
  return {
    syncId: row.id,
    status: row.status,
    reason: row.reason,
    startedAt: iso(row.startedAt)!,
    finishedAt: iso(row.finishedAt),
    counters: {
      records_collected: row.records_collected,
      records_created: row.records_created,
      requests_made: row.requests_made,
      requests_saved: row.requests_saved,
      hibernations: row.hibernations,
      requests_core: row.requests_core,
      requests_graphql: row.requests_graphql,
      requests_not_modified: row.requests_not_modified,
    },
    stages,
    hibernatingUntil: iso(row.hibernatingUntil),
    budget: row.budget,
    quota,
  };
}
