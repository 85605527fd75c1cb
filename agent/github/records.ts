import { z } from 'zod';

/**
 * The fields of GitHub's answers that the sync stores, checked before anything is written: a record
 * that does not parse makes its repository's stage "not reached" (malformed-answer), never a half row.
 * Each answer is flattened here into the row's shape (nested logins and states become columns).
 */
export const pullRequestSchema = z
  .object({
    id: z.string().min(1),
    number: z.number().int().positive(),
    title: z.string(),
    state: z.enum(['OPEN', 'CLOSED', 'MERGED']),
    createdAt: z.string().min(1),
    updatedAt: z.string().min(1),
    mergedAt: z.string().nullable(),
    // A deleted account's pull requests have no author.
    author: z.object({ login: z.string() }).nullable(),
    isDraft: z.boolean(),
    reviewDecision: z.enum(['APPROVED', 'CHANGES_REQUESTED', 'REVIEW_REQUIRED']).nullable(),
    closedAt: z.string().nullable(),
    baseRefName: z.string(),
    headRefName: z.string(),
    headRefOid: z.string().min(1),
    // Null when the head commit has no checks at all.
    statusCheckRollup: z.object({ state: z.enum(['ERROR', 'EXPECTED', 'FAILURE', 'PENDING', 'SUCCESS']) }).nullable(),
  })
  .transform((pr) => ({
    id: pr.id,
    number: pr.number,
    title: pr.title,
    state: pr.state,
    createdAt: pr.createdAt,
    updatedAt: pr.updatedAt,
    mergedAt: pr.mergedAt,
    author: pr.author?.login ?? null,
    isDraft: pr.isDraft ? 1 : 0,
    reviewDecision: pr.reviewDecision,
    closedAt: pr.closedAt,
    baseRefName: pr.baseRefName,
    headRefName: pr.headRefName,
    headRefOid: pr.headRefOid,
    checksState: pr.statusCheckRollup?.state ?? null,
  }));
export type PullRequestRecord = z.output<typeof pullRequestSchema>;

export const workflowRunSchema = z
  .object({
    id: z.number().int().positive(),
    name: z.string().nullable(),
    status: z.string().nullable(),
    conclusion: z.string().nullable(),
    created_at: z.string().min(1),
    updated_at: z.string().min(1),
    run_attempt: z.number().int().positive(),
    event: z.string(),
    head_sha: z.string().min(1),
    head_branch: z.string().nullable(),
    run_started_at: z.string().nullable(),
    actor: z.object({ login: z.string() }).nullable(),
    pull_requests: z.array(z.object({ number: z.number().int().positive() })),
  })
  .transform((run) => ({
    id: run.id,
    name: run.name,
    status: run.status,
    conclusion: run.conclusion,
    created_at: run.created_at,
    updated_at: run.updated_at,
    run_attempt: run.run_attempt,
    event: run.event,
    head_sha: run.head_sha,
    head_branch: run.head_branch,
    run_started_at: run.run_started_at,
    actor: run.actor?.login ?? null,
    // A JSON list of numbers in a text column: the same on both engines.
    pull_requests: JSON.stringify(run.pull_requests.map((p) => p.number)),
  }));
export type WorkflowRunRecord = z.output<typeof workflowRunSchema>;

export const workflowJobSchema = z.object({
  id: z.number().int().positive(),
  run_id: z.number().int().positive(),
  run_attempt: z.number().int().positive(),
  name: z.string(),
  status: z.string(),
  conclusion: z.string().nullable(),
  created_at: z.string().min(1),
  started_at: z.string().nullable(),
  completed_at: z.string().nullable(),
  runner_name: z.string().nullable(),
});
export type WorkflowJobRecord = z.output<typeof workflowJobSchema>;

/** A page that is not what GitHub documents; the reason token is `malformed-answer`. */
export class MalformedAnswerError extends Error {
  readonly reason = 'malformed-answer';
}

export function parseAll<T>(schema: z.ZodType<T, z.ZodTypeDef, unknown>, items: unknown, what: string): T[] {
  if (!Array.isArray(items)) throw new MalformedAnswerError(`${what}: not a list`);
  return items.map((item, i) => {
    const parsed = schema.safeParse(item);
    if (!parsed.success) throw new MalformedAnswerError(`${what}[${i}]: ${parsed.error.issues[0]?.message ?? 'invalid'}`);
    return parsed.data;
  });
}

/** One run, as `GET /repos/{owner}/{repo}/actions/runs/{run_id}` answers it. */
export function parseRun(item: unknown, what: string): WorkflowRunRecord {
  return parseAll(workflowRunSchema, [item], what)[0];
}
