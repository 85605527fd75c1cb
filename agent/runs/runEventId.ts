import { createHash } from 'node:crypto';

/** A UUID-shaped id that is the same every time for one run's start or finish. */
export function runEventId(runId: string, event: string): string {
  const h = createHash('sha256').update(`quantilica:${runId}:${event}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-5${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
}
