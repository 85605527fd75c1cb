/**
 * The simulator's repositories. They start from the same deterministic data every time (so two
 * runs, or a run and its resume, see the same records) and change only when a day is advanced
 * (`advanceDay`): runs complete, a failed run is re-run as a new attempt, new runs and pull requests
 * appear, pull requests are updated and merged, as GitHub's data changes between two daily syncs.
 */
export interface SimRepoData {
  index: number;
  fullName: string;
  pullRequests: SimPullRequest[];
  /** Oldest first; listings answer newest first. */
  runs: SimRun[];
  jobsPerRun: number;
  /** Every attempt's jobs, per run id. */
  jobs: Map<number, SimJob[]>;
}

export interface SimPullRequest {
  id: string;
  number: number;
  title: string;
  state: 'OPEN' | 'CLOSED' | 'MERGED';
  createdAt: string;
  updatedAt: string;
  mergedAt: string | null;
  closedAt: string | null;
  isDraft: boolean;
  reviewDecision: 'APPROVED' | 'CHANGES_REQUESTED' | 'REVIEW_REQUIRED' | null;
  author: { login: string } | null;
  baseRefName: string;
  headRefName: string;
  headRefOid: string;
  statusCheckRollup: { state: 'SUCCESS' | 'FAILURE' | 'PENDING' } | null;
}

export interface SimRun {
  id: number;
  name: string;
  status: 'completed' | 'in_progress' | 'queued';
  conclusion: 'success' | 'failure' | null;
  created_at: string;
  updated_at: string;
  run_attempt: number;
  event: string;
  head_sha: string;
  head_branch: string;
  run_started_at: string;
  actor: { login: string };
  pull_requests: Array<{ number: number }>;
}

export interface SimJob {
  id: number;
  run_id: number;
  run_attempt: number;
  name: string;
  status: 'completed' | 'in_progress' | 'queued';
  conclusion: 'success' | 'failure' | null;
  created_at: string;
  started_at: string | null;
  completed_at: string | null;
  runner_name: string | null;
}

/** What one simulated day changes in every repository. */
export interface DayShape {
  newRuns: number;
  updatedPullRequests: number;
  newPullRequests: number;
  /** Whether the runs in progress complete (false: a run that stays in progress for longer). */
  completeRuns: boolean;
}
export const DEFAULT_DAY: DayShape = { newRuns: 3, updatedPullRequests: 2, newPullRequests: 1, completeRuns: true };

/** GitHub lets a run be re-run this long after it was created. */
export const RERUN_WINDOW_MS = 30 * 86_400_000;

export function repoNames(count: number, owner = 'sim-org'): string[] {
  return Array.from({ length: count }, (_, i) => `${owner}/repo-${String(i + 1).padStart(3, '0')}`);
}

const DAY0 = Date.UTC(2026, 0, 1);
const iso = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');
const at = (k: number) => iso(DAY0 + k * 60_000);
const sha = (seed: string) => {
  let h = 2166136261;
  for (const c of seed) h = Math.imul(h ^ c.charCodeAt(0), 16777619) >>> 0;
  return h.toString(16).padStart(8, '0').repeat(5);
};

export function runId(repo: { index: number }, k: number): number {
  return repo.index * 1_000_000 + k;
}

export function jobId(run: number, attempt: number, j: number): number {
  return run * 1000 + attempt * 100 + j;
}

export function newRepo(index: number, fullName: string, pullRequests: number, runs: number, jobsPerRun: number): SimRepoData {
  const repo: SimRepoData = { index, fullName, pullRequests: [], runs: [], jobsPerRun, jobs: new Map() };
  for (let n = 1; n <= pullRequests; n++) repo.pullRequests.push(initialPullRequest(repo, n));
  // The newest run is still in progress when the first sync comes.
  for (let k = 1; k <= runs; k++) addRun(repo, k, at(k), k === runs ? 'in_progress' : 'completed');
  return repo;
}

function initialPullRequest(repo: SimRepoData, n: number): SimPullRequest {
  const state = n % 3 === 0 ? 'MERGED' : n % 3 === 1 ? 'OPEN' : 'CLOSED';
  return {
    id: `PR_kw${repo.index}n${n}`,
    number: n,
    title: `Change ${n} of ${repo.fullName}`,
    state,
    createdAt: at(n),
    updatedAt: at(n + 5),
    mergedAt: state === 'MERGED' ? at(n + 10) : null,
    closedAt: state === 'OPEN' ? null : at(n + 10),
    isDraft: false,
    reviewDecision: state === 'MERGED' ? 'APPROVED' : n % 2 === 0 ? 'CHANGES_REQUESTED' : null,
    author: n % 11 === 0 ? null : { login: `dev-${n % 5}` },
    baseRefName: 'main',
    headRefName: `change-${n}`,
    headRefOid: sha(`${repo.fullName}#${n}`),
    statusCheckRollup: n % 4 === 0 ? null : { state: n % 7 === 0 ? 'FAILURE' : 'SUCCESS' },
  };
}

function addRun(repo: SimRepoData, k: number, createdAt: string, status: SimRun['status']): SimRun {
  const id = runId(repo, k);
  const done = status === 'completed';
  const conclusion = !done ? null : k % 7 === 0 ? 'failure' : 'success';
  const pr = repo.pullRequests.length > 0 ? repo.pullRequests[k % repo.pullRequests.length] : undefined;
  const run: SimRun = {
    id,
    name: 'CI',
    status,
    conclusion,
    created_at: createdAt,
    updated_at: done ? iso(Date.parse(createdAt) + 3 * 60_000) : createdAt,
    run_attempt: 1,
    event: pr !== undefined && k % 2 === 0 ? 'pull_request' : 'push',
    head_sha: sha(`${repo.fullName}@${k}`),
    head_branch: pr !== undefined && k % 2 === 0 ? pr.headRefName : 'main',
    run_started_at: createdAt,
    actor: { login: `dev-${k % 5}` },
    pull_requests: pr !== undefined && k % 2 === 0 ? [{ number: pr.number }] : [],
  };
  repo.runs.push(run);
  repo.jobs.set(id, jobsOfAttempt(repo, run));
  return run;
}

function jobsOfAttempt(repo: SimRepoData, run: SimRun): SimJob[] {
  return Array.from({ length: repo.jobsPerRun }, (_, i) => {
    const j = i + 1;
    const done = run.status === 'completed';
    const started = Date.parse(run.run_started_at) + j * 1000;
    return {
      id: jobId(run.id, run.run_attempt, j),
      run_id: run.id,
      run_attempt: run.run_attempt,
      name: `job ${j}`,
      status: done ? 'completed' : j === 1 ? 'in_progress' : 'queued',
      conclusion: done ? (run.conclusion === 'failure' && j === 1 ? 'failure' : 'success') : null,
      created_at: run.run_started_at,
      started_at: done || j === 1 ? iso(started) : null,
      completed_at: done ? iso(started + 60_000) : null,
      runner_name: done || j === 1 ? `runner-${j}` : null,
    };
  });
}

/**
 * One simulated day (or `days`) later, at `nowMs` (data time): every run in progress completes, the
 * newest failed run that may still be re-run gets its next attempt, `shape.newRuns` runs are created
 * (the last still in progress), `shape.updatedPullRequests` open pull requests change (the first is
 * merged) and `shape.newPullRequests` are opened.
 */
export function advanceRepo(repo: SimRepoData, nowMs: number, shape: DayShape): void {
  let minute = 0;
  const tick = () => iso(nowMs + ++minute * 60_000);
  for (const run of repo.runs) {
    if (run.status === 'completed' || !shape.completeRuns) continue;
    run.status = 'completed';
    run.conclusion = 'success';
    run.updated_at = tick();
    repo.jobs.set(run.id, [...repo.jobs.get(run.id)!.filter((j) => j.run_attempt !== run.run_attempt), ...jobsOfAttempt(repo, run)]);
  }
  const failed = [...repo.runs].reverse().find((r) => r.conclusion === 'failure' && nowMs - Date.parse(r.created_at) < RERUN_WINDOW_MS);
  if (failed !== undefined) {
    failed.run_attempt += 1;
    failed.conclusion = 'success';
    failed.run_started_at = tick();
    failed.updated_at = tick();
    repo.jobs.get(failed.id)!.push(...jobsOfAttempt(repo, failed));
  }
  for (let i = 0; i < shape.newPullRequests; i++) {
    const n = repo.pullRequests.length + 1;
    const created = tick();
    repo.pullRequests.push({
      ...initialPullRequest(repo, n),
      state: 'OPEN',
      createdAt: created,
      updatedAt: created,
      mergedAt: null,
      closedAt: null,
      isDraft: true,
      reviewDecision: 'REVIEW_REQUIRED',
      statusCheckRollup: { state: 'PENDING' },
    });
  }
  const open = repo.pullRequests.filter((p) => p.state === 'OPEN' && !p.isDraft);
  open.slice(0, shape.updatedPullRequests).forEach((pr, i) => {
    pr.updatedAt = tick();
    if (i === 0) {
      pr.state = 'MERGED';
      pr.mergedAt = pr.updatedAt;
      pr.closedAt = pr.updatedAt;
      pr.reviewDecision = 'APPROVED';
    } else {
      pr.title = `${pr.title} (revised)`;
      pr.headRefOid = sha(`${pr.headRefOid}+`);
      pr.statusCheckRollup = { state: 'PENDING' };
    }
  });
  for (let i = 0; i < shape.newRuns; i++) {
    const k = repo.runs.length + 1;
    addRun(repo, k, tick(), i === shape.newRuns - 1 ? 'in_progress' : 'completed');
  }
}

/** The data clock: where day 0's data ends and each advanced day starts. */
export function dayStart(day: number): number {
  return DAY0 + day * 86_400_000;
}
