import { ResponseError } from 'vscode-jsonrpc/node';
import { ErrorCodes, FETCHER_NAME } from '../../shared/protocol';
import type { AgentClient } from '../client/agentClient';
import { ClientError, UnknownFetcherError } from '../errors';
import { ExitCode } from '../exitCodes';
import { AgentLostError, type AgentLink } from './agentLink';

/** Commands through the running agent; its protocol errors become CLI errors with exit codes. */
export function remoteLink(client: AgentClient): AgentLink {
  let lost = false;
  client.onClose(() => {
    lost = true;
  });
  const call = async <T>(fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (err) {
      // A request cut off by the connection's end is not the request's fault: the agent went away.
      if (lost) throw new AgentLostError(`the agent (pid ${client.info.pid}) closed the connection`);
      throw toClientError(err);
    }
  };
  // The protocol refuses a name no catalog can hold (`Comex`, `a/b`) as malformed params; to the
  // person who typed it, it is a name the catalog does not have, listed as for any other.
  const named = async (fetcher: string | undefined): Promise<void> => {
    if (fetcher === undefined || FETCHER_NAME.test(fetcher)) return;
    const { catalog } = await call(() => client.getSnapshot());
    throw new UnknownFetcherError(
      fetcher,
      catalog.map((e) => e.name),
    );
  };
  return {
    remote: true,
    run: async (fetcher, args) => {
      await named(fetcher);
      return call(() => client.run(fetcher, args, 'cli'));
    },
    waitRun: (runId) => call(() => client.waitRun(runId)),
    cancel: async (target) => {
      await named(target.fetcher);
      return call(() => client.cancel(target));
    },
    snapshot: () => call(() => client.getSnapshot()),
    listRuns: (limit) => call(() => client.listRuns(limit)),
    flush: (onProgress) => call(() => client.flush((p) => onProgress(p.sent, p.remaining))),
    setSchedulePaused: async (paused, fetcher) => {
      await named(fetcher);
      return call(() => client.setSchedulePaused(paused, fetcher));
    },
    listEvents: (params) => call(() => client.listEvents(params)),
    metrics: () => call(() => client.metrics()),
    close: () => client.close(),
  };
}

function toClientError(err: unknown): unknown {
  if (!(err instanceof ResponseError)) return err;
  const exitCode =
    err.code === ErrorCodes.unknownFetcher || err.code === ErrorCodes.unknownRun
      ? ExitCode.unknownName
      : err.code === ErrorCodes.unavailable
        ? ExitCode.agentUnavailable
        : ExitCode.usage;
  return new ClientError(err.code, exitCode, err.message);
}
