import type { FlushTelemetry, GetMetrics, ListEvents, RunInfo, RunTrigger, ScheduleStatus } from '../../shared/protocol';
import type { StateHub } from '../state/stateHub';

export type FlushResult = FlushTelemetry.Result;

/**
 * What the protocol server (and the CLI when it runs in-process) may ask of the agent. Methods throw
 * a `ClientError` subclass (agent/errors.ts) for bad input; the server maps it to a JSON-RPC error.
 */
export interface AgentControl {
  readonly hub: StateHub;
  run(fetcher: string, args: string[], trigger: RunTrigger): Promise<RunInfo>;
  waitRun(runId: string): Promise<RunInfo>;
  cancel(target: { runId?: string; fetcher?: string }): Promise<RunInfo[]>;
  listRuns(limit: number): RunInfo[];
  tailLog(runId: string, maxBytes: number): Promise<{ path: string; text: string; truncated: boolean }>;
  flush(onProgress: (sent: number, remaining: number) => void): Promise<FlushResult>;
  setSchedulePaused(paused: boolean, fetcher?: string): ScheduleStatus;
  /** The recent operator events (absent: this process keeps none); `abort` lets a waiting caller give up. */
  listEvents?(params: ListEvents.Params, abort: (stop: () => void) => void): Promise<ListEvents.Result>;
  /** The Prometheus text of the metrics. */
  metrics?(): Promise<GetMetrics.Result>;
}
