import * as crypto from 'node:crypto';
import * as os from 'node:os';
import { z } from 'zod';
import type { Config } from '../config/config';
import type { Logger } from '../log/logger';
import { Flusher, type FlushOutcome, type ProgressListener } from './flusher';
import { Spool } from './spool';
import type { NewTelemetryEvent } from './telemetrySink';

/** What `quantilica telemetry emit <kind>` takes; strings as commander hands them over, numbers from code. */
export interface TelemetryEmitOptions {
  runId?: string;
  task?: string;
  pool?: string;
  status?: string;
  exitCode?: string | number;
  signal?: string;
  reason?: string;
  /** Seconds. */
  duration?: string | number;
  /** ISO-8601 time of the event; now when absent. */
  at?: string;
}

export interface EmitCliResult {
  ok: boolean;
  /** 0 stored, 1 lost (the spool cannot be written), 2 invalid input. */
  exitCode: 0 | 1 | 2;
  /** One line for the user: what was stored, or what is wrong with the input. */
  message: string;
  eventId: string | null;
  runId: string | null;
}

export const EMIT_KINDS = ['start', 'heartbeat', 'finish'] as const;

/** How far ahead of this machine's clock `--at` may be (clock skew between hosts). */
export const MAX_FUTURE_SKEW_SECONDS = 300;

// Numbers arrive as strings from commander and as numbers from code: one path for both, one message.
const asText = (value: unknown) => (typeof value === 'number' ? String(value) : value);
const integer = z.preprocess(
  asText,
  z
    .string()
    .trim()
    .regex(/^-?\d+$/, 'must be a whole number')
    .transform(Number),
);
const seconds = z.preprocess(
  asText,
  z
    .string()
    .trim()
    .regex(/^\d+(\.\d+)?$/, 'must be a number of seconds (not negative)')
    .transform(Number),
);
const text = (max: number) =>
  z
    .string()
    .trim()
    .min(1, 'must not be empty')
    .max(max)
    .refine((s) => !s.includes('\0'), 'must not contain NUL');
const isoTime = z
  .string()
  .trim()
  .refine((s) => /^\d{4}-\d{2}-\d{2}T/.test(s) && Number.isFinite(Date.parse(s)), 'must be an ISO-8601 time such as 2025-01-31T12:00:00Z');

const common = {
  task: text(200).optional(),
  pool: text(100).optional(),
  at: isoTime.optional(),
};
const schemas = {
  start: z.object({ ...common, runId: text(200).optional(), task: text(200) }),
  heartbeat: z.object({ ...common, runId: text(200) }),
  finish: z.object({
    ...common,
    runId: text(200),
    status: z.enum(['completed', 'failed', 'cancelled']),
    exitCode: integer.pipe(z.number().min(-2147483648).max(2147483647)).optional(),
    signal: text(20).optional(),
    reason: text(500).optional(),
    duration: seconds.optional(),
  }),
};

/**
 * `quantilica telemetry emit <start|heartbeat|finish>`: the seed's `workers.cli telemetry emit` for
 * scripts outside the agent. Validates, then writes through the same spool as the agent (which flushes
 * it). A start without --run-id gets a new one, printed so the script can pass it to heartbeat/finish.
 */
export function emitFromCli(
  kind: string,
  options: TelemetryEmitOptions,
  spool: Spool,
  context: { now?: Date; heldWaitMs?: number } = {},
): EmitCliResult {
  const now = context.now ?? new Date();
  const invalid = (message: string): EmitCliResult => ({ ok: false, exitCode: 2, message, eventId: null, runId: null });
  if (!(EMIT_KINDS as readonly string[]).includes(kind))
    return invalid(`unknown event ${JSON.stringify(kind)}; allowed: ${EMIT_KINDS.join(', ')}`);
  const parsed = schemas[kind as (typeof EMIT_KINDS)[number]].safeParse(definedOnly(options));
  if (!parsed.success) {
    return invalid(parsed.error.issues.map((i) => `--${flagName(String(i.path[0] ?? kind))}: ${i.message}`).join('; '));
  }
  const o = parsed.data as z.infer<typeof schemas.finish> & { runId?: string; task?: string };
  // A time ahead of the clock is a wrong clock or a wrong argument; stored, it would give a run a
  // negative duration in PostgreSQL for good. A little skew between machines is allowed.
  if (o.at !== undefined && Date.parse(o.at) > now.getTime() + MAX_FUTURE_SKEW_SECONDS * 1000) {
    return invalid(
      `--at: ${o.at} is in the future (more than ${MAX_FUTURE_SKEW_SECONDS} s after this machine's clock, ${now.toISOString()}); give the time the event happened`,
    );
  }
  const runId = o.runId ?? crypto.randomUUID();
  const payload: Record<string, unknown> = { source: 'cli' };
  if (kind === 'start') Object.assign(payload, { host: os.hostname(), pid: process.ppid });
  if (kind === 'finish') {
    payload.status = o.status;
    if (o.exitCode !== undefined) payload.exitCode = o.exitCode;
    if (o.signal !== undefined) payload.signal = o.signal;
    if (o.reason !== undefined) payload.reason = o.reason;
    if (o.duration !== undefined) payload.durationSeconds = o.duration;
  }
  const event: NewTelemetryEvent = { runId, event: kind as NewTelemetryEvent['event'], task: o.task ?? '', pool: o.pool ?? '', payload };
  if (o.at !== undefined) event.at = o.at;
  let eventId = spool.emit(event);
  // Held in memory (no file takes it now): a script's process ends soon, so wait a little, then say LOST.
  if (eventId !== null && spool.status().held > 0 && spool.settleHeld(context.heldWaitMs ?? 10_000) > 0) eventId = null;
  if (eventId === null) {
    return {
      ok: false,
      exitCode: 1,
      message: `${kind} event of run ${runId} LOST: ${spool.status().error ?? 'the spool cannot be written'}`,
      eventId: null,
      runId,
    };
  }
  return { ok: true, exitCode: 0, message: `${kind} event ${eventId} of run ${runId} spooled in ${spool.path ?? '?'}`, eventId, runId };
}

/**
 * `quantilica telemetry flush` / `quantilica flush`: flushes the configured spool now and closes
 * everything. Waits for a flush of the same spool by another process (the agent) to finish first.
 */
export async function flushFromCli(
  config: Pick<Config, 'telemetrySpool' | 'databaseUrl'>,
  logger: Logger,
  onProgress?: ProgressListener,
  options: { fallbackPath?: string; batchSize?: number } = {},
): Promise<FlushOutcome> {
  const spool = new Spool({ path: config.telemetrySpool, logger, fallbackPath: options.fallbackPath });
  const flusher = new Flusher({ spool, databaseUrl: config.databaseUrl, logger, batchSize: options.batchSize });
  try {
    return await flusher.flushNow(onProgress);
  } finally {
    await flusher.close();
    spool.close();
  }
}

function definedOnly(options: TelemetryEmitOptions): Record<string, unknown> {
  return Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined));
}

function flagName(key: string): string {
  return key === 'duration' ? 'duration' : key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}
