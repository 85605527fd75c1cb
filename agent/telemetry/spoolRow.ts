import * as crypto from 'node:crypto';
import { errorText } from './openSpoolDatabase';
import type { SpoolColumns } from './spoolTypes';
import type { NewTelemetryEvent } from './telemetrySink';

// One spool row, both ways: made safe when it is stored (toSpoolRow), checked again before it is
// sent (invalidReason), because a spool file may also hold rows of another writer.

export interface SpoolRow {
  eventId: string;
  runId: string;
  event: string;
  at: string;
  task: string;
  pool: string;
  payload: string;
}

/**
 * Makes an event safe to store and to send: a bad time or a payload JSON cannot hold would otherwise
 * fail its PostgreSQL batch for ever. PostgreSQL text and jsonb cannot hold NUL, so it is dropped.
 */
export function toSpoolRow(event: NewTelemetryEvent, now: Date): SpoolRow {
  const eventId = event.eventId !== undefined && /^[0-9a-f-]{36}$/.test(event.eventId) ? event.eventId : crypto.randomUUID();
  const parsed = event.at === undefined ? NaN : Date.parse(event.at);
  const at = Number.isFinite(parsed) ? new Date(parsed).toISOString() : now.toISOString();
  let payload: string;
  try {
    const extra = event.at !== undefined && !Number.isFinite(parsed) ? { invalidAt: String(event.at) } : {};
    payload = JSON.stringify({ ...event.payload, ...extra }, (_key, value: unknown) =>
      typeof value === 'string' ? noNul(value) : typeof value === 'bigint' ? value.toString() : value,
    );
  } catch (err) {
    payload = JSON.stringify({ unserializablePayload: errorText(err) });
  }
  return {
    eventId,
    runId: noNul(String(event.runId)),
    event: String(event.event),
    at,
    task: noNul(String(event.task)),
    pool: noNul(String(event.pool)),
    payload,
  };
}

function noNul(text: string): string {
  return text.includes('\0') ? text.replace(/\0/g, '') : text;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const KINDS = new Set([
  'start',
  'heartbeat',
  'finish',
  'waiting',
  'skipped',
  'reclaimed',
  'cancel-requested',
  'hibernated',
  'resumed',
  'stalled',
]);
const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})$/;
const MAX_TEXT = 1_000;

/**
 * Why a spooled row cannot be sent, as a reason token, or null when it can. Our own emits always pass
 * (toSpoolRow makes them so); a row that fails was written by something else (an older or foreign
 * writer, a damaged file), and one such row must not stop every row behind it.
 */
export function invalidReason(b: SpoolColumns, i: number): string | null {
  if (!UUID.test(b.eventIds[i])) return 'invalid-event-id';
  if (!KINDS.has(b.events[i])) return 'invalid-event-kind';
  if (!text(b.runIds[i], 1)) return 'invalid-run-id';
  if (!text(b.tasks[i], 0) || !text(b.pools[i], 0)) return 'invalid-text';
  if (!ISO_TIME.test(b.ats[i]) || !Number.isFinite(Date.parse(b.ats[i]))) return 'invalid-time';
  if (!payloadOk(b.payloads[i])) return 'invalid-payload';
  return null;
}

function text(value: string, min: number): boolean {
  return typeof value === 'string' && value.length >= min && value.length <= MAX_TEXT && !value.includes('\0');
}

function payloadOk(payload: string): boolean {
  // jsonb holds no NUL character, escaped or not.
  if (typeof payload !== 'string' || payload.includes('\0') || payload.includes('\\u0000')) return false;
  try {
    const value: unknown = JSON.parse(payload);
    return typeof value === 'object' && value !== null && !Array.isArray(value);
  } catch {
    return false;
  }
}

/** The rows of a batch at `indexes`, as a batch of their own. */
export function pickRows(b: SpoolColumns, indexes: readonly number[]): SpoolColumns {
  const pick = <T>(values: T[]) => indexes.map((i) => values[i]);
  return {
    seqs: pick(b.seqs),
    eventIds: pick(b.eventIds),
    runIds: pick(b.runIds),
    events: pick(b.events),
    ats: pick(b.ats),
    tasks: pick(b.tasks),
    pools: pick(b.pools),
    payloads: pick(b.payloads),
  };
}
