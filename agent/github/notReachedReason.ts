import { MalformedAnswerError } from './records';
import { UnauthorizedError } from './unauthorizedError';

/** The reason token of a repository's stage that ended without its checkpoint (never a success). */
export function notReachedReason(error: unknown, timedOut: boolean): string {
  if (timedOut) return 'timeout';
  if (error instanceof MalformedAnswerError || error instanceof UnauthorizedError) return error.reason;
  const e = error as { name?: unknown; status?: unknown; response?: unknown; errors?: Array<{ type?: string }> };
  if (e.name === 'MissingPageInfo' || e.name === 'MissingCursorChange') return 'malformed-answer';
  if (e.name === 'GraphqlResponseError') return e.errors?.some((x) => x.type === 'NOT_FOUND') === true ? 'not-found' : 'graphql-error';
  if (e.name === 'HttpError' && typeof e.status === 'number') {
    if (e.response === undefined) return 'connection-lost';
    if (e.status >= 500) return 'server-error';
    if (e.status === 404) return 'not-found';
    if (e.status === 401) return 'unauthorized';
    if (e.status === 403) return 'forbidden';
    return 'http-error';
  }
  if (e.name === 'AbortError') return 'aborted';
  return 'task-error';
}
