import type Database from 'better-sqlite3';
import type { SpoolStatus } from '../../shared/protocol';
import type { Logger } from '../log/logger';
import { errorText, isCorruptionError, moveAside, openSpoolDatabase, type OpenedSpool } from './openSpoolDatabase';
import { DELETE_THROUGH, INSERT_EVENT, SELECT_BATCH, SELECT_META, SELECT_OLDEST, SELECT_PENDING, UPSERT_META } from './spoolSql';
import type { NewTelemetryEvent, TelemetrySink } from './telemetrySink';
import { toSpoolRow } from './toSpoolRow';

export const DEFAULT_FALLBACK_SPOOL = '/tmp/quantilica_telemetry_spool.db';

export interface SpoolOptions {
  /** Config.telemetrySpool. */
  path: string;
  logger: Logger;
  /** Where to go when `path` cannot be written; the seed's /tmp path by default (tests use a temp dir). */
  fallbackPath?: string;
  /** Log a lost event at error level for the first loss and then once every this many. */
  lostLogEvery?: number;
  /** While no file can be written, try again at most this often (on an emit). */
  reopenIntervalMs?: number;
  now?: () => Date;
}

/** SpoolStatus plus the spool's own trouble (a corrupt file moved aside, an unwritable path). */
export interface SpoolHealth extends SpoolStatus {
  error: string | null;
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

export type SpoolChange = 'emit' | 'lost' | 'flush' | 'database' | 'error';
type Statements = ReturnType<typeof prepare>;

/**
 * The durable store-and-forward queue of telemetry: every event is written to SQLite (WAL, synchronous
 * FULL) before emit returns, and leaves only when the flush has committed it to PostgreSQL.
 */
export class Spool implements TelemetrySink {
  private opened: OpenedSpool | null = null;
  private statements: Statements | null = null;
  private openError: string | null = null;
  private lastOpenAttempt = 0;
  private lost = 0;
  private database: SpoolStatus['database'] = 'not-configured';
  private lastFlushAt: string | null = null;
  private lastFlushError: string | null = null;
  private readonly listeners = new Set<(change: SpoolChange) => void>();
  private readonly fallbackPath: string;
  private readonly now: () => Date;

  constructor(private readonly options: SpoolOptions) {
    this.fallbackPath = options.fallbackPath ?? DEFAULT_FALLBACK_SPOOL;
    this.now = options.now ?? (() => new Date());
    this.open();
  }

  /** Stores the event durably; returns its id, or null when it was lost (counted, logged, in status). */
  emit(event: NewTelemetryEvent): string | null {
    try {
      const row = toSpoolRow(event, this.now());
      if (this.statements === null && Date.now() - this.lastOpenAttempt >= (this.options.reopenIntervalMs ?? 60_000)) this.open();
      if (this.statements === null) return this.lose(row.eventId, new Error(this.openError ?? 'no spool file'));
      const insert = (statements: Statements) => statements.insert.run(row.eventId, row.runId, row.event, row.at, row.task, row.pool, row.payload, Date.now());
      try {
        insert(this.statements);
      } catch (err) {
        // A file that turned corrupt under us is moved aside; the event goes into the new one.
        if (!this.recover(err)) throw err;
        const fresh = this.currentStatements();
        if (fresh === null) return this.lose(row.eventId, err);
        insert(fresh);
      }
      this.notify('emit');
      return row.eventId;
    } catch (err) {
      return this.lose(null, err);
    }
  }

  /**
   * Stores many events in one transaction (one fsync): for bulk producers and the benchmark's fill.
   * All or nothing: on failure every event is counted lost. Returns the ids, like emit.
   */
  emitMany(events: readonly NewTelemetryEvent[]): Array<string | null> {
    const statements = this.statements;
    if (statements === null) return events.map((e) => this.emit(e));
    try {
      const rows = events.map((e) => toSpoolRow(e, this.now()));
      const spooledMs = Date.now();
      const db = this.opened?.db;
      if (db === undefined) return events.map((e) => this.emit(e));
      db.transaction(() => {
        for (const r of rows) statements.insert.run(r.eventId, r.runId, r.event, r.at, r.task, r.pool, r.payload, spooledMs);
      })();
      this.notify('emit');
      return rows.map((r) => r.eventId);
    } catch (err) {
      if (this.recover(err)) return events.map((e) => this.emit(e));
      return events.map(() => this.lose(null, err));
    }
  }

  status(): SpoolHealth {
    let pending = 0;
    let oldestAgeSeconds: number | null = null;
    if (this.statements !== null) {
      try {
        pending = this.statements.pending.pluck().get() as number;
        const oldest = this.statements.oldest.pluck().get() as number | undefined;
        oldestAgeSeconds = oldest === undefined ? null : Math.max(0, (Date.now() - oldest) / 1000);
        // Another process (a CLI flush) may have flushed this spool: its record is the newest.
        this.lastFlushAt = this.meta('lastFlushAt') ?? this.lastFlushAt;
        const storedError = this.meta('lastFlushError');
        if (storedError !== undefined) this.lastFlushError = storedError === '' ? null : storedError;
      } catch (err) {
        this.recover(err);
      }
    }
    return {
      path: this.opened?.path ?? null,
      fallback: this.opened?.fallback ?? false,
      pending,
      oldestAgeSeconds,
      lastFlushAt: this.lastFlushAt,
      lastFlushError: this.lastFlushError,
      lost: this.lost,
      database: this.database,
      error: this.openError,
    };
  }

  /** The file in use, or null while events are being lost. */
  get path(): string | null {
    return this.opened?.path ?? null;
  }

  pending(): number {
    try {
      return this.statements === null ? 0 : (this.statements.pending.pluck().get() as number);
    } catch (err) {
      if (!this.recover(err)) this.options.logger.warn({ err: errorText(err) }, 'cannot count the spooled events');
      return this.pendingOrZero();
    }
  }

  /** The oldest `limit` events, in spool order. */
  readBatch(limit: number): SpooledEvent[] {
    if (this.statements === null) return [];
    const rows = this.statements.batch.raw().all(limit) as Array<[number, string, string, string, string, string, string, string]>;
    return rows.map(([seq, eventId, runId, event, at, task, pool, payload]) => ({ seq, eventId, runId, event, at, task, pool, payload }));
  }

  /**
   * The oldest `limit` events as columns, the shape the flush sends them in: no object per event, so a
   * flush of a million events keeps the heap small.
   */
  readColumns(limit: number): SpoolColumns {
    const columns: SpoolColumns = { seqs: [], eventIds: [], runIds: [], events: [], ats: [], tasks: [], pools: [], payloads: [] };
    if (this.statements === null) return columns;
    for (const row of this.statements.batch.raw().iterate(limit) as IterableIterator<[number, string, string, string, string, string, string, string]>) {
      columns.seqs.push(row[0]);
      columns.eventIds.push(row[1]);
      columns.runIds.push(row[2]);
      columns.events.push(row[3]);
      columns.ats.push(row[4]);
      columns.tasks.push(row[5]);
      columns.pools.push(row[6]);
      columns.payloads.push(row[7]);
    }
    return columns;
  }

  /** Removes every event up to `seq`; called only after PostgreSQL committed them. */
  deleteThrough(seq: number): void {
    this.statements?.deleteThrough.run(seq);
  }

  recordFlush(at: Date, error: string | null): void {
    if (error === null) this.lastFlushAt = at.toISOString();
    this.lastFlushError = error;
    try {
      if (error === null) this.statements?.upsertMeta.run('lastFlushAt', this.lastFlushAt);
      this.statements?.upsertMeta.run('lastFlushError', error ?? '');
    } catch (err) {
      this.options.logger.warn({ err: errorText(err) }, 'cannot record the flush in the spool');
    }
    this.notify('flush');
  }

  setDatabase(state: SpoolStatus['database']): void {
    if (state === this.database) return;
    this.database = state;
    this.notify('database');
  }

  onChange(listener: (change: SpoolChange) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  close(): void {
    this.listeners.clear();
    const db = this.opened?.db;
    this.opened = null;
    this.statements = null;
    db?.close();
  }

  private open(): void {
    this.lastOpenAttempt = Date.now();
    const result = openSpoolDatabase(this.options.path, this.fallbackPath, this.options.logger, this.now);
    this.opened = result.opened;
    this.statements = result.opened === null ? null : prepare(result.opened.db);
    if (result.error !== null || this.openError !== null) {
      this.openError = result.error;
      this.notify('error');
    }
  }

  /** A corrupt spool discovered after opening: move it aside and start a new one; false if not corruption. */
  private recover(err: unknown): boolean {
    if (!isCorruptionError(err) || this.opened === null) return false;
    const file = this.opened.path;
    this.opened.db.close();
    this.opened = null;
    this.statements = null;
    try {
      const aside = moveAside(file, this.now());
      this.options.logger.error({ path: file, movedTo: aside, err: errorText(err) }, 'telemetry spool became corrupt; moved aside, starting a new one');
    } catch (moveErr) {
      this.options.logger.error({ path: file, err: errorText(moveErr) }, 'telemetry spool is corrupt and cannot be moved aside');
    }
    this.open();
    this.openError = `telemetry spool ${file} was corrupt (${errorText(err)}) and was moved aside` + (this.openError === null ? '' : `; ${this.openError}`);
    this.notify('error');
    return true;
  }

  private lose(eventId: string | null, err: unknown): null {
    this.lost += 1;
    const every = this.options.lostLogEvery ?? 100;
    if (this.lost === 1 || this.lost % every === 0) {
      this.options.logger.error({ lost: this.lost, eventId, err: errorText(err) }, `telemetry event lost: the spool cannot store it (${this.lost} lost so far)`);
    }
    this.notify('lost');
    return null;
  }

  private pendingOrZero(): number {
    try {
      return this.statements === null ? 0 : (this.statements.pending.pluck().get() as number);
    } catch {
      return 0;
    }
  }

  private currentStatements(): Statements | null {
    return this.statements;
  }

  private meta(key: string): string | undefined {
    return this.statements?.meta.pluck().get(key) as string | undefined;
  }

  private notify(change: SpoolChange): void {
    for (const listener of this.listeners) {
      try {
        listener(change);
      } catch (err) {
        this.options.logger.error({ err: errorText(err) }, 'spool listener failed');
      }
    }
  }
}

function prepare(db: Database.Database) {
  return {
    insert: db.prepare(INSERT_EVENT),
    batch: db.prepare(SELECT_BATCH),
    deleteThrough: db.prepare(DELETE_THROUGH),
    pending: db.prepare(SELECT_PENDING),
    oldest: db.prepare(SELECT_OLDEST),
    meta: db.prepare(SELECT_META),
    upsertMeta: db.prepare(UPSERT_META),
  };
}
