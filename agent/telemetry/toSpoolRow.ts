import * as crypto from 'node:crypto';
import { errorText } from './openSpoolDatabase';
import type { NewTelemetryEvent } from './telemetrySink';

export interface SpoolRow { eventId: string; runId: string; event: string; at: string; task: string; pool: string; payload: string }

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
    payload = JSON.stringify({ ...event.payload, ...extra }, (_key, value: unknown) => (typeof value === 'string' ? noNul(value) : typeof value === 'bigint' ? value.toString() : value));
  } catch (err) {
    payload = JSON.stringify({ unserializablePayload: errorText(err) });
  }
  return { eventId, runId: noNul(String(event.runId)), event: String(event.event), at, task: noNul(String(event.task)), pool: noNul(String(event.pool)), payload };
}

function noNul(text: string): string {
  return text.includes('\0') ? text.replace(/\0/g, '') : text;
}
