import type { FlushTelemetry } from '../../shared/protocol';
import type { Logger } from '../log/logger';
import { FlushLock } from './flushLock';
import { PrivateFlock } from './privateFlock';
import { migrate } from '../db/migrate';
import { errorText } from './openSpoolDatabase';
import { sendIsolating } from './sendBatch';
import type { Spool } from './spool';
import type { SpoolColumns } from './spoolTypes';
import { invalidReason, pickRows } from './spoolRow';
import { isConnectionError, TelemetryDatabase } from './telemetryDatabase';

export interface FlusherOptions {
  spool: Spool;
  /** Config.databaseUrl; null keeps every event in the spool (status says 'not-configured'). */
  databaseUrl: string | null;
  logger: Logger;
  /** Events per PostgreSQL transaction. */
  batchSize?: number;
  /** How soon after an emit the automatic flush runs (events arriving meanwhile join the same flush). */
  debounceMs?: number;
  /** First and largest wait between attempts while PostgreSQL is down (doubling in between). */
  retryInitialMs?: number;
  retryMaxMs?: number;
  /** How long an on-demand flush waits for another process's flush of the same spool to finish. */
  lockWaitMs?: number;
  connectTimeoutMs?: number;
  queryTimeoutMs?: number;
  applicationName?: string;
}

/** The protocol's flush result plus what the tests and the CLI want to know beyond it. */
export interface FlushOutcome extends FlushTelemetry.Result {
  /** Events of this flush that were new to PostgreSQL (fewer than `sent` after a crash resent a batch). */
  inserted: number;
  /** True when another process held the spool's flush lock and this flush did nothing. */
  busy: boolean;
}

export type ProgressListener = (sent: number, remaining: number) => void;

/**
 * Carries spooled events to PostgreSQL: soon after events are emitted, on a timer with capped
 * exponential backoff while the database is down, and on demand (`flushNow`). One flush at a time in
 * this process (a promise chain) and across processes (FlushLock).
 */
export class Flusher {
  private readonly db: TelemetryDatabase | null;
  private chain: Promise<unknown> = Promise.resolve();
  private timer: NodeJS.Timeout | null = null;
  private timerAt = 0;
  private retryDelayMs = 0;
  private retryUntil = 0;
  private migrated = false;
  private closed = false;
  private unsubscribe: (() => void) | null = null;

  constructor(private readonly options: FlusherOptions) {
    this.db =
      options.databaseUrl === null
        ? null
        : new TelemetryDatabase({
            url: options.databaseUrl,
            logger: options.logger,
            applicationName: options.applicationName,
            connectTimeoutMs: options.connectTimeoutMs,
            queryTimeoutMs: options.queryTimeoutMs,
          });
    // 'down' until the first flush connects: nothing has been sent yet.
    options.spool.setDatabase(this.db === null ? 'not-configured' : 'down');
  }

  /** Starts the automatic flush: now (leftovers of an earlier run), then after emits and on retries. */
  start(): void {
    if (this.db === null || this.closed || this.unsubscribe !== null) return;
    this.unsubscribe = this.options.spool.onChange((change) => {
      if (change === 'emit') this.schedule(this.options.debounceMs ?? 250);
    });
    this.schedule(0);
  }

  /** Flushes everything spooled now, waiting for another process's flush of this spool if need be. */
  flushNow(onProgress?: ProgressListener): Promise<FlushOutcome> {
    return this.enqueue(() => this.flush(onProgress, this.options.lockWaitMs ?? 120_000));
  }

  /** Stops the timers, waits for a flush in progress (bounded by the query timeouts), closes the pool. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.unsubscribe?.();
    this.unsubscribe = null;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    await this.chain.catch(() => {});
    await this.db?.close();
  }

  private enqueue(job: () => Promise<FlushOutcome>): Promise<FlushOutcome> {
    const run = this.chain.then(job, job);
    this.chain = run.catch(() => {});
    return run;
  }

  private schedule(delayMs: number): void {
    if (this.closed || this.db === null) return;
    // While PostgreSQL is down, emits do not bring the next attempt forward: the backoff decides.
    const at = Math.max(Date.now() + delayMs, this.retryUntil);
    if (this.timer !== null && this.timerAt <= at) return;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.enqueue(() => this.flush(undefined, 0)).then((outcome) => this.afterAutomatic(outcome));
    }, at - Date.now());
    // The timer alone must not keep a process alive (the CLI, a test).
    this.timer.unref();
  }

  private afterAutomatic(outcome: FlushOutcome): void {
    if (outcome.busy) {
      // Another process is flushing this spool; look again shortly, whatever it leaves.
      this.schedule(1_000);
    } else if (outcome.error !== null) {
      const initial = this.options.retryInitialMs ?? 1_000;
      this.retryDelayMs = Math.min(this.options.retryMaxMs ?? 300_000, this.retryDelayMs === 0 ? initial : this.retryDelayMs * 2);
      this.retryUntil = Date.now() + this.retryDelayMs;
      this.schedule(0);
    } else if (outcome.remaining > 0) {
      this.schedule(0);
    }
  }

  private async flush(onProgress: ProgressListener | undefined, lockWaitMs: number): Promise<FlushOutcome> {
    const { spool, logger } = this.options;
    if (this.db === null) {
      return {
        sent: 0,
        inserted: 0,
        busy: false,
        remaining: spool.pending(),
        error: 'QUANTILICA_DATABASE_URL is not set: events stay in the spool',
      };
    }
    if (this.closed) return { sent: 0, inserted: 0, busy: false, remaining: spool.pending(), error: 'the flusher is closed' };
    // Events of a fallback written while this spool could not be, and a file deleted under us: first.
    spool.maintain();
    spool.drainFallback();
    const spoolPath = spool.path;
    if (spoolPath === null) return { sent: 0, inserted: 0, busy: false, remaining: 0, error: spool.status().error ?? 'no spool file' };
    let lock: PrivateFlock | null;
    try {
      lock = await this.acquireLock(FlushLock.pathFor(spoolPath), lockWaitMs);
    } catch (err) {
      return { sent: 0, inserted: 0, busy: false, remaining: spool.pending(), error: `cannot take the flush lock: ${errorText(err)}` };
    }
    if (lock === null) {
      const error = lockWaitMs > 0 ? `another process is still flushing ${spoolPath} after ${lockWaitMs} ms` : null;
      return { sent: 0, inserted: 0, busy: true, remaining: spool.pending(), error };
    }
    let sent = 0;
    let inserted = 0;
    try {
      onProgress?.(0, spool.pending());
      await this.db.use(async (client) => {
        if (!this.migrated) {
          await migrate(client, logger);
          this.migrated = true;
        }
        const batchSize = this.options.batchSize ?? 5_000;
        for (;;) {
          const generation = spool.generation;
          const batch = spool.readColumns(batchSize);
          const count = batch.seqs.length;
          if (count === 0) break;
          const { valid, invalid } = splitValid(batch);
          const { inserted: added, refused } = valid.seqs.length === 0 ? { inserted: 0, refused: [] } : await sendIsolating(client, valid);
          inserted += added;
          const bad = [...invalid, ...refused];
          if (bad.length > 0) {
            logger.error({ rows: bad }, 'telemetry rows that cannot be sent; moving them to the quarantine');
            spool.quarantine(bad, generation);
          }
          spool.deleteThrough(batch.seqs[count - 1], generation);
          sent += count - bad.length;
          onProgress?.(sent, spool.pending());
          if (this.closed) break;
        }
      });
      this.retryDelayMs = 0;
      this.retryUntil = 0;
      spool.setDatabase('connected');
      spool.recordFlush(new Date(), null);
      if (sent > 0) logger.debug({ sent, inserted }, 'telemetry flushed');
      return { sent, inserted, busy: false, remaining: spool.pending(), error: null };
    } catch (err) {
      const down = isConnectionError(err);
      const error = `${down ? 'PostgreSQL unreachable' : 'flush failed'}: ${errorText(err)}`;
      spool.setDatabase(down ? 'down' : 'connected');
      spool.recordFlush(new Date(), error);
      logger[down ? 'warn' : 'error']({ err: errorText(err), sent }, 'telemetry flush failed; events stay in the spool');
      return { sent, inserted, busy: false, remaining: spool.pending(), error };
    } finally {
      lock.release();
    }
  }

  /** Polls the lock up to `waitMs` (0: one try). Bounded, and a crashed holder frees it at once. */
  private acquireLock(lockPath: string, waitMs: number): Promise<PrivateFlock | null> {
    return PrivateFlock.acquire(lockPath, waitMs, () => this.closed);
  }
}

/** The rows that can be sent, and the others with the reason they cannot. */
function splitValid(batch: SpoolColumns): { valid: SpoolColumns; invalid: Array<{ seq: number; reason: string }> } {
  const good: number[] = [];
  const invalid: Array<{ seq: number; reason: string }> = [];
  for (let i = 0; i < batch.seqs.length; i += 1) {
    const reason = invalidReason(batch, i);
    if (reason === null) good.push(i);
    else invalid.push({ seq: batch.seqs[i], reason });
  }
  return { valid: invalid.length === 0 ? batch : pickRows(batch, good), invalid };
}
