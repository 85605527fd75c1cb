import { ResponseError, type CancellationToken } from 'vscode-jsonrpc';
import {
  CancelRun,
  ErrorCodes,
  FlushTelemetry,
  GetHistory,
  GetMetrics,
  GetSnapshot,
  Hello,
  Initialize,
  ListEvents,
  ListRuns,
  ReadLog,
  PROTOCOL_VERSION,
  RunFetcher,
  SetSchedulePaused,
  Shutdown,
  TailLog,
  WaitRun,
  type FlushProgress,
  type ParamsOf,
  type RequestMethod,
  type ResultOf,
  type Snapshot,
} from '../../shared/protocol';
import type { AgentControl } from './agentControl';
import { readLog } from './logFollow';
import { stationHistory } from './stationHistory';

export interface RequestContext {
  readonly cancel: CancellationToken;
  /**
   * Called by hello with the snapshot it answers: from this moment on, every change after that
   * snapshot's version is pushed to the client, none before it.
   */
  startChanges(snapshot: Snapshot): void;
  sendProgress(token: string | number, value: FlushProgress): void;
}

/** A handler gets the params its schema checked and must answer what its RequestType declares. */
type Handler<M extends RequestMethod> = (params: ParamsOf<M>, ctx: RequestContext) => ResultOf<M> | Promise<ResultOf<M>>;
export type RequestHandlers = { [M in RequestMethod]: Handler<M> };

const DEFAULT_LIST_LIMIT = 50;
/** LSP's RequestCancelled: the code vscode-languageclient recognises as "the caller gave up". */
const REQUEST_CANCELLED = -32800;
const DEFAULT_TAIL_BYTES = 64 * 1024;

/** The agent's answer to each protocol request, given params that passed their schema. */
export function requestHandlers(control: AgentControl): RequestHandlers {
  return {
    [Initialize.method]: (): Initialize.Result => ({
      capabilities: {},
      serverInfo: { name: 'quantilica-agent', version: String(PROTOCOL_VERSION) },
    }),
    [Shutdown.method]: (): null => null,
    [Hello.method]: (params, ctx): Hello.Result => {
      if (params.protocolVersion !== PROTOCOL_VERSION) {
        throw new ResponseError(
          ErrorCodes.protocolVersion,
          `${params.client} speaks protocol version ${params.protocolVersion}, this agent speaks version ${PROTOCOL_VERSION}: update the older of the two`,
        );
      }
      // Snapshot and subscription happen in the same tick, so no change can fall between them.
      const snapshot = control.hub.snapshot();
      ctx.startChanges(snapshot);
      return { protocolVersion: PROTOCOL_VERSION, snapshot };
    },
    [GetSnapshot.method]: (): GetSnapshot.Result => control.hub.snapshot(),
    // Answered once the run is durably recorded: an agent killed right after cannot lose it.
    [RunFetcher.method]: async (params): Promise<RunFetcher.Result> => ({
      run: await control.run(params.fetcher, params.args ?? [], params.trigger ?? 'protocol'),
    }),
    [WaitRun.method]: (params, ctx): Promise<WaitRun.Result> =>
      new Promise((resolve, reject) => {
        // The client may give up waiting ($/cancelRequest); the run itself goes on.
        const onCancel = ctx.cancel.onCancellationRequested(() => {
          reject(
            new ResponseError(REQUEST_CANCELLED, `stopped waiting for ${params.runId}: the client cancelled the request (the run goes on)`),
          );
        });
        control.waitRun(params.runId).then(
          (run) => {
            onCancel.dispose();
            resolve({ run });
          },
          (err: unknown) => {
            onCancel.dispose();
            reject(err instanceof Error ? err : new Error(String(err)));
          },
        );
      }),
    [CancelRun.method]: async (params): Promise<CancelRun.Result> => ({
      cancelled: await control.cancel(params.runId !== undefined ? { runId: params.runId } : { fetcher: params.fetcher }),
    }),
    [ListRuns.method]: (params): ListRuns.Result => ({ runs: control.listRuns(params?.limit ?? DEFAULT_LIST_LIMIT) }),
    [TailLog.method]: async (params): Promise<TailLog.Result> => {
      const tail = await control.tailLog(params.runId, params.maxBytes ?? DEFAULT_TAIL_BYTES);
      return { runId: params.runId, ...tail };
    },
    [FlushTelemetry.method]: async (params, ctx): Promise<FlushTelemetry.Result> => {
      const token = params?.workDoneToken;
      const progress = (value: FlushProgress): void => {
        if (token !== undefined) ctx.sendProgress(token, value);
      };
      const pending = control.hub.snapshot().spool?.pending ?? 0;
      progress({
        kind: 'begin',
        title: 'Flushing telemetry',
        message: `${pending} events to send`,
        percentage: 0,
        sent: 0,
        remaining: pending,
      });
      const result = await control.flush((sent, remaining) => {
        const total = sent + remaining;
        progress({
          kind: 'report',
          message: `${sent} sent, ${remaining} remaining`,
          percentage: total > 0 ? Math.floor((sent / total) * 100) : 100,
          sent,
          remaining,
        });
      });
      progress({
        kind: 'end',
        message:
          result.error === null
            ? `${result.sent} sent, ${result.remaining} remaining`
            : `stopped after ${result.sent} sent: ${result.error}`,
        sent: result.sent,
        remaining: result.remaining,
      });
      return result;
    },
    [GetHistory.method]: (params): GetHistory.Result => stationHistory(control, params),
    [ReadLog.method]: (params, ctx): Promise<ReadLog.Result> => readLog(control, params, ctx.cancel),
    [ListEvents.method]: (params, ctx): Promise<ListEvents.Result> => {
      if (!control.listEvents) throw new ResponseError(ErrorCodes.unavailable, 'this agent keeps no operator events');
      return control.listEvents(params ?? {}, (stop) => {
        ctx.cancel.onCancellationRequested(stop);
      });
    },
    [GetMetrics.method]: (): Promise<GetMetrics.Result> => {
      if (!control.metrics) throw new ResponseError(ErrorCodes.unavailable, 'this agent has no metrics');
      return control.metrics();
    },
    [SetSchedulePaused.method]: (params): SetSchedulePaused.Result => ({
      schedule: control.setSchedulePaused(params.paused, params.fetcher),
    }),
  };
}
