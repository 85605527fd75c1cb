import { clockTime, plural, reasonWords } from '../../shared/humanWords';
import type { GithubSyncStatus } from './githubSyncStatus';
import { STAGES } from './store/githubStore';

/**
 * What a GitHub sync writes into its run's log (it prints nothing of its own): each leg's start, and
 * at each leg's end the stages' progress (repositories done, not reached with why, not yet reached),
 * the counters, and a hibernation's budget and wake-up time.
 */
export function legStartLines(first: boolean, slot: number | null, pool: string): string[] {
  return [`GitHub sync ${first ? 'started' : 'resumed after hibernating'}: holds ${pool} slot ${slot ?? '?'} while it works.`];
}

export function legEndLines(
  status: GithubSyncStatus | null,
  end:
    | { kind: 'hibernate'; until: number; budget: string }
    | { kind: 'completed' }
    | { kind: 'failed' | 'cancelled'; reason: string }
    | { kind: 'storage-lost'; cause: string; message: string },
): string[] {
  const lines: string[] = [];
  if (status) {
    for (const stage of STAGES) {
      const p = status.stages[stage];
      const waiting = p.total - p.done - p.notReached;
      lines.push(
        `stage ${stage}: ${p.done} of ${plural(p.total, 'repository', 'repositories')} done, ${p.notReached} not reached, ${waiting} not yet reached.`,
      );
      for (const m of p.notReachedRepos) lines.push(`  not reached in ${stage}: ${m.repo} (${reasonWords(m.reason)})`);
    }
    const c = status.counters;
    lines.push(
      `${plural(c.records_collected, 'record')} (${c.records_created} new), ${plural(c.requests_made, 'request')} made, ${c.requests_saved} saved by ETags, ${plural(c.hibernations, 'hibernation')} so far.`,
    );
    for (const [budget, q] of Object.entries(status.quota))
      lines.push(`${budget} budget: ${q.remaining} of ${q.limit} left, resets at ${q.resetAt}.`);
  }
  if (end.kind === 'hibernate')
    lines.push(
      `hibernating: the ${end.budget} budget is spent; the slot is released; wakes at ${new Date(end.until).toISOString()} (${clockTime(new Date(end.until).toISOString())} local).`,
    );
  else if (end.kind === 'completed') lines.push('GitHub sync completed.');
  else if (end.kind === 'storage-lost')
    lines.push(
      `storage lost (${end.cause}: ${end.message}); the slot is released; the sync waits for its storage and resumes from its checkpoints.`,
    );
  else lines.push(`GitHub sync ${end.kind}: ${reasonWords(end.reason)} (${end.reason}).`);
  return lines;
}
