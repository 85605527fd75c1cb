/**
 * The simulator's repositories, made up deterministically from their index so that two runs (or a run
 * and its resume) see the same records: pull requests, workflow runs, and the jobs of each run.
 */
export interface SimRepoData {
  index: number;
  fullName: string;
  pullRequests: number;
  runs: number;
  jobsPerRun: number;
}

export function repoNames(count: number, owner = 'sim-org'): string[] {
  return Array.from({ length: count }, (_, i) => `${owner}/repo-${String(i + 1).padStart(3, '0')}`);
}

const at = (k: number) => new Date(Date.UTC(2026, 0, 1) + k * 60_000).toISOString().replace('.000Z', 'Z');

export function pullRequest(repo: SimRepoData, n: number): Record<string, unknown> {
  const state = n % 3 === 0 ? 'MERGED' : n % 3 === 1 ? 'OPEN' : 'CLOSED';
  return {
    id: `PR_kw${repo.index}n${n}`,
    number: n,
    title: `Change ${n} of ${repo.fullName}`,
    state,
    createdAt: at(n),
    updatedAt: at(n + 5),
    mergedAt: state === 'MERGED' ? at(n + 10) : null,
  };
}

export function runId(repo: SimRepoData, k: number): number {
  return repo.index * 1_000_000 + k;
}

export function workflowRun(repo: SimRepoData, k: number): Record<string, unknown> {
  return {
    id: runId(repo, k),
    name: 'CI',
    status: 'completed',
    conclusion: k % 7 === 0 ? 'failure' : 'success',
    created_at: at(k),
    updated_at: at(k + 3),
    html_url: `https://github.com/${repo.fullName}/actions/runs/${runId(repo, k)}`,
  };
}

export function workflowJob(run: number, j: number): Record<string, unknown> {
  return {
    id: run * 100 + j,
    run_id: run,
    name: `job ${j}`,
    status: 'completed',
    conclusion: 'success',
    started_at: at(j),
    completed_at: at(j + 1),
  };
}
