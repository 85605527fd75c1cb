import { ErrorCodes as RpcErrorCodes, ResponseError } from 'vscode-jsonrpc';
import { ClientError } from '../errors';
import type { Logger } from '../log/logger';

/**
 * The JSON-RPC error a client gets for a failed request: its own mistakes (ClientError) with the
 * agent's code and message; anything else is the agent's fault, logged in full and reported briefly.
 */
export function toResponseError(err: unknown, method: string, logger: Logger): ResponseError<void> {
  if (err instanceof ResponseError) return err as ResponseError<void>;
  if (err instanceof ClientError) return new ResponseError(err.code, err.message);
  const message = err instanceof Error ? err.message : String(err);
  logger.error({ err, method }, 'request failed inside the agent');
  return new ResponseError(RpcErrorCodes.InternalError, `${method} failed inside the agent: ${message} (details in the agent's log)`);
}
