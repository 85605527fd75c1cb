import type { RunInfo, RunTrigger, ScheduleStatus } from '../../shared/protocol';
import type { StateHub } from '../state/stateHub';

export interface FlushResult {
  sent: number;
  remaining: number;
  error: string | null;
}

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
}
