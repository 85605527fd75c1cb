import type { SpoolStatus } from '../../shared/protocol';
import type { Logger } from '../log/logger';

export interface SpoolOptions {
  /** Config.telemetrySpool. */
  path: string;
  logger: Logger;
  /** Where to go when `path` cannot be written; a private per-user folder by default (defaultFallbackSpool). */
  fallbackPath?: string;
  /** Log a lost event at error level for the first loss and then once every this many. */
  lostLogEvery?: number;
  /** While the configured file cannot be written, try it again at most this often. */
  reopenIntervalMs?: number;
  /** Events kept in memory while no file takes them (busy for long, disks full); beyond, they are lost. */
  heldMax?: number;
  /** How long close() keeps trying to write events still held in memory. */
  closeWaitMs?: number;
  now?: () => Date;
}

/** SpoolStatus plus the spool's own trouble (a corrupt file moved aside, an unwritable path). */
export interface SpoolHealth extends SpoolStatus {
  error: string | null;
  quarantined: number;
  held: number;
}

/** One spooled event as the flush sends it; payload is JSON text. */
export interface SpooledEvent {
  seq: number;
  eventId: string;
  runId: string;
  event: string;
  at: string;
  task: string;
  pool: string;
  payload: string;
}

/** A batch of spooled events as parallel arrays, in spool order. */
export interface SpoolColumns {
  seqs: number[];
  eventIds: string[];
  runIds: string[];
  events: string[];
  ats: string[];
  tasks: string[];
  pools: string[];
  payloads: string[];
}

/**
 * A run's state as the spool stores it (the runs table): the spool does not know what a run is, it
 * keeps the row in the same transaction as the run's events (agent/runs/runStore.ts reads it).
 */
export interface RunRow {
  runId: string;
  fetcher: string;
  status: string;
  enqueuedAt: string;
  ownerPid: number;
  ownerStartTime: number;
  /** The whole run as JSON. */
  body: string;
}
