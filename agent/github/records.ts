import { z } from 'zod';

/**
 * The fields of GitHub's answers that the sync stores, checked before anything is written: a record
 * that does not parse makes its repository's stage "not reached" (malformed-answer), never a half row.
 */
export const pullRequestSchema = z.object({
  id: z.string().min(1),
  number: z.number().int().positive(),
  title: z.string(),
  state: z.enum(['OPEN', 'CLOSED', 'MERGED']),
  createdAt: z.string().min(1),
  updatedAt: z.string().min(1),
  mergedAt: z.string().nullable(),
});
export type PullRequestRecord = z.infer<typeof pullRequestSchema>;

export const workflowRunSchema = z.object({
  id: z.number().int().positive(),
  name: z.string().nullable(),
  status: z.string().nullable(),
  conclusion: z.string().nullable(),
  created_at: z.string().min(1),
  updated_at: z.string().min(1),
});
export type WorkflowRunRecord = z.infer<typeof workflowRunSchema>;

export const workflowJobSchema = z.object({
  id: z.number().int().positive(),
  run_id: z.number().int().positive(),
  name: z.string(),
  status: z.string(),
  conclusion: z.string().nullable(),
  started_at: z.string().nullable(),
  completed_at: z.string().nullable(),
});
export type WorkflowJobRecord = z.infer<typeof workflowJobSchema>;

/** A page that is not what GitHub documents; the reason token is `malformed-answer`. */
export class MalformedAnswerError extends Error {
  readonly reason = 'malformed-answer';
}

export function parseAll<T>(schema: z.ZodType<T>, items: unknown, what: string): T[] {
  if (!Array.isArray(items)) throw new MalformedAnswerError(`${what}: not a list`);
  return items.map((item, i) => {
    const parsed = schema.safeParse(item);
    if (!parsed.success) throw new MalformedAnswerError(`${what}[${i}]: ${parsed.error.issues[0]?.message ?? 'invalid'}`);
    return parsed.data;
  });
}
