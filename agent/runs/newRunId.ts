import { randomBytes } from 'node:crypto';

/** Random bytes drawn a page at a time: a burst of enqueues calls into OpenSSL once per 1,024 ids, not once each. */
const POOL_BYTES = 4096;
const ID_BYTES = 4;
let pool = Buffer.alloc(0);
let used = 0;

/** Sortable by time, unique enough across processes, and safe in file names. */
export function newRunId(): string {
  if (used + ID_BYTES > pool.length) {
    pool = randomBytes(POOL_BYTES);
    used = 0;
  }
  used += ID_BYTES;
  return `${Date.now().toString(36)}-${pool.toString('hex', used - ID_BYTES, used)}`;
}
