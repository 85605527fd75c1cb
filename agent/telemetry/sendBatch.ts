import type pg from 'pg';
import { faultPoint } from './faultInjection';
import { INSERT_BATCH } from './flushSql';
import { errorText } from './openSpoolDatabase';
import type { SpoolColumns } from './spoolTypes';
import { pickRows } from './spoolRow';

/**
 * Sends one batch (see batchParams) in one transaction: the events (idempotent by event id) and the runs they move
 * forward. Returns how many events were new to PostgreSQL. The caller deletes the batch from the spool
 * only after this resolves, that is after COMMIT.
 */
export async function sendBatch(client: pg.ClientBase, params: BatchParams): Promise<number> {
  faultPoint('before-begin');
  await client.query('BEGIN');
  try {
    const result = await client.query<{ inserted: number }>(INSERT_BATCH, params);
    faultPoint('after-insert');
    await client.query('COMMIT');
    faultPoint('after-commit');
    return result.rows[0]?.inserted ?? 0;
  } catch (err) {
    // The connection may be gone; the server rolls back on its own then.
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  }
}

export type BatchParams = [string, string, string, string, string, string, string, string];

/**
 * The statement's parameters: one array literal per column. Built before the round trips, so that the
 * batch's many small strings die young instead of living through them.
 */
export function batchParams(batch: SpoolColumns): BatchParams {
  return [
    textArray(batch.eventIds),
    textArray(batch.runIds),
    textArray(batch.events),
    textArray(batch.ats),
    textArray(batch.tasks),
    textArray(batch.pools),
    textArray(batch.payloads),
    `{${batch.seqs.join(',')}}`,
  ];
}

/**
 * A PostgreSQL array literal of strings, built in one pass. pg would build the same text, but through
 * tens of thousands of intermediate strings that stay alive while the batch is in flight; that garbage
 * made V8 grow its young generation by some 30 MB during a long flush.
 */
export function textArray(values: readonly string[]): string {
  const parts = new Array<string>(values.length);
  for (let i = 0; i < values.length; i += 1) {
    const v = values[i];
    parts[i] = NEEDS_ESCAPE.test(v) ? `"${v.replace(ESCAPED, '\\$&')}"` : `"${v}"`;
  }
  return `{${parts.join(',')}}`;
}

const NEEDS_ESCAPE = /[\\"]/;
const ESCAPED = /[\\"]/g;

/** Events PostgreSQL refused, with the reason token (`postgres-refused-<SQLSTATE>`) and its message. */
export interface RefusedRow {
  seq: number;
  reason: string;
  detail: string;
}

/**
 * Sends a batch; when PostgreSQL refuses it for its data (a value it cannot take: SQLSTATE classes 22,
 * 23, 54), halves it until the refused rows are alone, sends the rest and returns those rows to be
 * quarantined. A refusal for any other cause (connection, timeout) is thrown: it says nothing of a row.
 */
export async function sendIsolating(client: pg.ClientBase, batch: SpoolColumns): Promise<{ inserted: number; refused: RefusedRow[] }> {
  try {
    return { inserted: await sendBatch(client, batchParams(batch)), refused: [] };
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (typeof code !== 'string' || !/^(22|23|54)/.test(code)) throw err;
    if (batch.seqs.length === 1)
      return { inserted: 0, refused: [{ seq: batch.seqs[0], reason: `postgres-refused-${code}`, detail: errorText(err) }] };
    const half = Math.ceil(batch.seqs.length / 2);
    const all = batch.seqs.map((_, i) => i);
    const first = await sendIsolating(client, pickRows(batch, all.slice(0, half)));
    const second = await sendIsolating(client, pickRows(batch, all.slice(half)));
    return { inserted: first.inserted + second.inserted, refused: [...first.refused, ...second.refused] };
  }
}
