import type { WaitReason } from '../../shared/protocol';

/** Why the postgres slot backend cannot take a slot now (a run's wait reason says it). */
export type SlotBackendCause = Extract<WaitReason, { kind: 'slot-backend' }>['cause'];

/** SQLSTATEs of a server that is there but takes no connection now, or that ended ours. */
const UNREACHABLE_STATES = new Set(['57P01', '57P02', '57P03']);
/** Socket errors of a server that is down or cut off (what a restart or an outage gives). */
const UNREACHABLE_ERRNOS = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EHOSTDOWN',
  'EPIPE',
  'EAI_AGAIN',
  'ENOTFOUND',
]);
/** node-postgres' own errors without a code: a connection that ended, or a connect that timed out. */
const UNREACHABLE_MESSAGES = /connection terminated|timeout expired|not queryable|connection ended/i;

/**
 * Whether an error of the slot database is one to wait out (the server is down, or at its connection
 * cap: SQLSTATE 53300, which max_connections, a role's or a database's CONNECTION LIMIT give) rather
 * than one that fails the run (a refused password, a missing table). Null: not a cause to wait for.
 */
export function slotBackendCause(err: { code?: unknown; message?: unknown } | null | undefined): SlotBackendCause | null {
  const code = typeof err?.code === 'string' ? err.code : '';
  if (code === '53300') return 'connection-cap';
  if (code.startsWith('08') || UNREACHABLE_STATES.has(code) || UNREACHABLE_ERRNOS.has(code)) return 'unreachable';
  if (code === '' && typeof err?.message === 'string' && UNREACHABLE_MESSAGES.test(err.message)) return 'unreachable';
  return null;
}
