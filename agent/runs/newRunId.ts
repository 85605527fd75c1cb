import { randomBytes } from 'node:crypto';

/** Sortable by time, unique enough across processes, and safe in file names. */
export function newRunId(): string {
  return `${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
}
