import type { GetMetrics, ListEvents, RunInfo, ScheduleStatus, Snapshot } from '../../shared/protocol';
import type { FlushResult } from '../server/agentControl';

/**
 * What a CLI command needs from "the agent": either the running agent over the protocol, or an
 * orchestrator in this process (same slots, same state files) when no agent answers.
 */
export interface AgentLink {
  readonly remote: boolean;
  run(fetcher: string, args: string[]): Promise<RunInfo>;
  waitRun(runId: string): Promise<RunInfo>;
  cancel(target: { runId?: string; fetcher?: string }): Promise<RunInfo[]>;
  snapshot(): Promise<Snapshot>;
  listRuns(limit: number): Promise<RunInfo[]>;
  flush(onProgress: (sent: number, remaining: number) => void): Promise<FlushResult>;
  setSchedulePaused(paused: boolean, fetcher?: string): Promise<ScheduleStatus>;
  /** The agent's recent operator events (only a running agent keeps them). */
  listEvents(params: ListEvents.Params): Promise<ListEvents.Result>;
  /** The Prometheus text: the agent's, or without one computed here from the run store and the station. */
  metrics(): Promise<GetMetrics.Result>;
  close(): Promise<void>;
}

/** The agent went away (stopped or died) while a request was under way. */
export class AgentLostError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'AgentLostError';
  }
}
