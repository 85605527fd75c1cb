import { MalformedAnswerError, parseAll, parseRun, workflowRunSchema } from './records';
import { repoPath } from './repoPath';
import { restPages } from './restPages';
import type { StageContext } from './stageContext';
import type { StoredEtag } from './store/streamStore';

/** GitHub lets a run be re-run up to 30 days after it was created: the listing looks back that far. */
export const RERUN_LOOKBACK_MS = 30 * 86_400_000;
/** A filtered workflow-runs listing answers at most this many runs, however many match. */
export const FILTERED_RESULTS_CAP = 1000;
/**
 * The listing's start moves only when it falls this far behind the re-run window: until then its URL,
 * and so the ETags of its pages, stay those of the last sync, and a day without changes costs 304s.
 */
export const WINDOW_SLACK_MS = 7 * 86_400_000;
/** The checkpoint cursor of a sync's recent-runs listing: a resume lists again (its pages cost a 304). */
export const RECENT_PHASE = 'recent';

const iso = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');

/**
 * The runs created since `highWater` minus the re-run window, newest first, each page conditional; a
 * range whose listing reaches the 1,000-result cap is split in two halves of time until each fits.
 * Then every run stored unfinished that this listing did not bring is read again by id.
 */
export async function syncRecentRuns(c: StageContext, repo: string, highWater: string, signal: AbortSignal): Promise<void> {
  const etags = await c.streams.etags(`${repoPath(repo)}/actions/runs`);
  const from = await windowStart(c, repo, highWater);
  await listRange(c, repo, `>=${iso(from).slice(0, 10)}`, { from, to: null }, etags, signal);
  for (const id of await c.streams.unfinishedRuns(repo, c.syncId)) {
    signal.throwIfAborted();
    const path = `${repoPath(repo)}/actions/runs/${id}`;
    for await (const page of restPages(c.client, path, etags, signal, `${repo} run ${id}`)) {
      if (page.notModified) continue;
      await c.store.upsertWorkflowRuns(c.syncId, repo, [parseRun(page.data, `${repo} run ${id}`)], RECENT_PHASE, c.pending.take());
      await saveEtag(c, page.path, page.etag);
    }
  }
}

/**
 * From a whole day within the re-run window of the newest stored run; the start kept from the last
 * sync while it reaches back at most WINDOW_SLACK_MS further than the window needs.
 */
async function windowStart(c: StageContext, repo: string, highWater: string): Promise<number> {
  const wanted = Date.parse(`${iso(Date.parse(highWater) - RERUN_LOOKBACK_MS).slice(0, 10)}T00:00:00Z`);
  const kept = (await c.streams.state(repo, 'workflow_runs'))?.windowFrom ?? null;
  const keptAt = kept === null ? NaN : Date.parse(kept);
  if (keptAt <= wanted && wanted - keptAt <= WINDOW_SLACK_MS) return keptAt;
  await c.streams.keepWindow(repo, 'workflow_runs', iso(wanted));
  return wanted;
}

async function listRange(
  c: StageContext,
  repo: string,
  created: string,
  range: { from: number; to: number | null },
  etags: Map<string, StoredEtag>,
  signal: AbortSignal,
): Promise<void> {
  const first = `${repoPath(repo)}/actions/runs?per_page=${c.client.pageSize}&created=${encodeURIComponent(created)}`;
  let firstPage = true;
  for await (const page of restPages(c.client, first, etags, signal, `${repo} workflow_runs`)) {
    const total = page.notModified ? (page.etag?.totalCount ?? null) : Number(page.data?.total_count);
    const to = range.to ?? Date.now() + 86_400_000;
    if (firstPage && total !== null && total >= FILTERED_RESULTS_CAP && to - range.from >= 2000) {
      const mid = Math.floor((range.from + to) / 2000) * 1000;
      // Newest half first, as the listing itself goes.
      await listRange(c, repo, `${iso(mid + 1000)}..${iso(to)}`, { from: mid + 1000, to }, etags, signal);
      await listRange(c, repo, `${iso(range.from)}..${iso(mid)}`, { from: range.from, to: mid }, etags, signal);
      return;
    }
    firstPage = false;
    if (page.notModified) continue;
    const runs = page.data?.workflow_runs;
    if (runs === undefined) throw new MalformedAnswerError(`${repo} workflow_runs: missing`);
    await c.store.upsertWorkflowRuns(
      c.syncId,
      repo,
      parseAll(workflowRunSchema, runs, `${repo} workflow_runs`),
      RECENT_PHASE,
      c.pending.take(),
    );
    await saveEtag(c, page.path, page.etag);
  }
}

async function saveEtag(c: StageContext, path: string, etag: StoredEtag | null): Promise<void> {
  if (etag !== null) await c.streams.saveEtag(path, etag);
}
