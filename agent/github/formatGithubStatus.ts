import type { GithubSyncStatus } from './githubSyncStatus';
import { STAGES } from './store/githubStore';

/** The human view of `quantilica github status`; `--json` prints GithubSyncStatus itself. */
export function formatGithubStatus(s: GithubSyncStatus | null): string {
  if (s === null) return 'no github sync yet\n';
  const out: string[] = [];
  const sleeping = s.hibernatingUntil !== null ? ` (hibernating until ${s.hibernatingUntil}, ${s.budget ?? '?'} budget)` : '';
  out.push(
    `github sync ${s.syncId} ${s.status}${s.reason !== null ? ` (${s.reason})` : ''}${sleeping}; started ${s.startedAt}${s.finishedAt !== null ? `, finished ${s.finishedAt}` : ''}`,
  );
  for (const stage of STAGES) {
    const p = s.stages[stage];
    out.push(`  ${stage.padEnd(8)} ${p.done}/${p.total} done, ${p.notReached} not reached`);
    for (const r of p.notReachedRepos) out.push(`    ${r.repo}  ${r.reason}`);
  }
  const c = s.counters;
  out.push(`  records  ${c.records_collected} collected, ${c.records_created} created`);
  out.push(
    `  requests ${c.requests_made} made, ${c.requests_saved} saved, ${c.requests_not_modified} not modified (no quota); ${c.hibernations} hibernations`,
  );
  const quota = Object.entries(s.quota).map(([budget, q]) => `${budget} ${q.remaining}/${q.limit} (resets ${q.resetAt})`);
  out.push(`  quota    ${quota.length > 0 ? quota.join(', ') : 'not known yet'}`);
  return `${out.join('\n')}\n`;
}
