/** What the agent records about runs; the spool stores it durably and the flush carries it to PostgreSQL. */
export type TelemetryEventKind =
  | 'start'
  | 'heartbeat'
  | 'finish'
  | 'waiting'
  | 'skipped'
  | 'reclaimed'
  | 'cancel-requested'
  | 'hibernated'
  | 'resumed'
  // The stall watchdog: a run's log stopped growing for its stallSeconds.
  | 'stalled';

export interface TelemetryEvent {
  /** Given when the event is made, so a flush that is repeated cannot duplicate it. */
  eventId: string;
  runId: string;
  event: TelemetryEventKind;
  /** ISO-8601 time the event happened. */
  at: string;
  task: string;
  pool: string;
  payload: Record<string, unknown>;
}

/**
 * An event to record. `eventId` is made by the sink unless the caller gives one: a caller that may
 * emit the same event twice (a finish re-emitted by the agent that adopts a run after a crash) gives
 * a stable id, so PostgreSQL keeps it once.
 */
export type NewTelemetryEvent = Omit<TelemetryEvent, 'eventId' | 'at'> & { at?: string; eventId?: string };

/**
 * Where the run manager sends events. `emit` is synchronous and never throws: a sink that cannot
 * store an event counts the loss and makes it visible (spool health), because a fetcher must run
 * even when telemetry cannot be written.
 */
export interface TelemetrySink {
  emit(event: NewTelemetryEvent): void;
}
