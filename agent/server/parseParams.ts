import { ErrorCodes as RpcErrorCodes, ResponseError } from 'vscode-jsonrpc';
import type { z } from 'zod';
import { REQUESTS, type ParamsOf, type RequestMethod } from '../../shared/protocol';

/**
 * A request's params as its schema in the registry gives them back, or an InvalidParams error that
 * names each field and what is wrong with it (`invalid params for quantilica/run: fetcher: must be …`).
 */
export function parseParams<M extends RequestMethod>(method: M, params: unknown): ParamsOf<M> {
  const parsed = REQUESTS[method].params.safeParse(params);
  if (!parsed.success)
    throw new ResponseError(RpcErrorCodes.InvalidParams, `invalid params for ${method}: ${describeIssues(parsed.error)}`);
  return parsed.data;
}

/** One line per problem: `fetcher: must be a catalog fetcher name …`. */
function describeIssues(error: z.ZodError): string {
  return error.issues.map((i) => `${i.path.length > 0 ? i.path.join('.') : 'params'}: ${i.message}`).join('; ');
}
