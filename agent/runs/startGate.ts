import type { RunReason, WaitReason } from '../../shared/protocol';

/** What the run manager tells a gate about a run that wants to start. */
export interface GateRequest {
  runId: string;
  fetcher: string;
  /** Declared expected download size of the fetcher, if the catalog has one. */
  expectedBytes: number | null;
}

/**
 * A check in front of every fetcher start (the disk gate). The run manager awaits `waitToStart`
 * before it takes a slot; a rejection with a `RunRefusedError` ends the run as failed with that
 * reason. `onWait` reports why the run is waiting, for status and the extension.
 */
export interface StartGate {
  waitToStart(request: GateRequest, signal: AbortSignal, onWait: (reason: WaitReason) => void): Promise<void>;
  /** A run admitted by the gate has started (its data dir is now growing). */
  runStarted(request: GateRequest): void;
  /** The run ended (any status): its reservation is released. */
  runEnded(runId: string): void;
}

/** A gate or the slot wait refused a run; `reason` is a stable token such as `disk-backpressure-timeout`. */
export class RunRefusedError extends Error {
  constructor(readonly reason: RunReason, message: string) {
    super(message);
    this.name = 'RunRefusedError';
  }
}

/** The gate used when no other is configured: every run may start at once. */
export const openGate: StartGate = {
  waitToStart: async () => {},
  runStarted: () => {},
  runEnded: () => {},
};
