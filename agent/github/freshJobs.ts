import { parseAll, workflowJobSchema, type WorkflowJobRecord } from './records';
import { repoPath } from './repoPath';
import { restPages, type RestPage } from './restPages';
import type { StageContext } from './stageContext';

/**
 * The jobs of every run of the repository whose stored jobs are not GitHub's any more (another
 * attempt, an update, jobs stored unfinished), every attempt's (`filter=all`). A run whose jobs are
 * fresh costs no request: that alone is a request saved. A 304 on every page re-marks what is stored.
 */
export async function syncFreshJobs(c: StageContext, repo: string, signal: AbortSignal): Promise<void> {
  const etags = c.full ? null : await c.streams.etags(`${repoPath(repo)}/actions/runs/`);
  for (const run of await c.streams.runsJobs(repo, c.syncId)) {
    signal.throwIfAborted();
    if (run.fresh) {
      c.pending.requestSaved();
      continue;
    }
    const path = `${repoPath(repo)}/actions/runs/${run.id}/jobs?filter=all&per_page=${c.client.pageSize}`;
    const what = `${repo} run ${run.id} jobs`;
    let pages: RestPage[] = [];
    for await (const page of restPages(c.client, path, etags, signal, what)) pages.push(page);
    if (pages.every((p) => p.notModified)) {
      await c.store.storeJobs(c.syncId, run.id, [], c.pending.take(), await c.streams.jobsComplete(run.id));
      continue;
    }
    // Some pages changed and some did not: the unchanged ones' records are not at hand, read them all.
    if (pages.some((p) => p.notModified)) {
      pages = [];
      for await (const page of restPages(c.client, path, null, signal, what)) pages.push(page);
    }
    const jobs: WorkflowJobRecord[] = pages.flatMap((p) => parseAll(workflowJobSchema, p.data?.jobs, what));
    await c.store.storeJobs(c.syncId, run.id, jobs, c.pending.take());
    for (const p of pages) if (p.etag !== null) await c.streams.saveEtag(p.path, p.etag);
  }
}
