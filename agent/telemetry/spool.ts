import type { SpoolStatus } from '../../shared/protocol';
import { errorText, isBusyError, isCorruptionError, moveAside, openSpoolDatabase, sleepSync, type OpenedSpool } from './openSpoolDatabase';
import { defaultFallbackSpool } from './privateDir';
import type Database from 'better-sqlite3';
import { GroupCommit } from './groupCommit';
import { drainFallback, insertRows, readAllRows, readAllRuns, type PendingRow } from './spoolCopy';
import { prepareStatements, quarantineRows, readBatch, readColumns, readCounts, type SpoolStatements } from './spoolStatements';
import type { RunRow, SpoolColumns, SpooledEvent, SpoolHealth, SpoolOptions } from './spoolTypes';
import { identityOf } from './sqliteFileGuard';
import { WalSync } from './walSync';
import type { NewTelemetryEvent, TelemetrySink } from './telemetrySink';
import { toSpoolRow } from './spoolRow';

export type { RunRow, SpoolColumns, SpooledEvent, SpoolHealth, SpoolOptions } from './spoolTypes';

export type SpoolChange = 'emit' | 'lost' | 'flush' | 'database' | 'error' | 'quarantine';

const TICK_MS = 1_000;
const REOPEN_BUSY_WAIT_MS = 2_000;

/**
 * The durable store-and-forward queue of telemetry: every event is on disk in SQLite (WAL) before emit
 * returns or a commit's promise resolves (the WAL fsynced by WalSync, or synchronous FULL when the WAL
 * cannot be opened), and leaves only when the flush has committed it to PostgreSQL.
 *
 * Where an event goes, in order: the configured file; if that file cannot take writes (full disk,
 * read-only) the private fallback file, drained back once the configured one works again; if no file
 * takes it (or the file is busy for long) memory, retried every second and on close. A busy file is
 * waited for, never left: a fallback written only because of a burst would be flushed by nobody.
 */
export class Spool implements TelemetrySink {
  private opened: OpenedSpool | null = null;
  private statements: SpoolStatements | null = null;
  /** dev:ino of the file, its -wal and -shm as opened: a file deleted or replaced under us shows here. */
  private identity: Array<[string, string | null]> = [];
  private openError: string | null = null;
  private lastOpenAttempt = 0;
  private lost = 0;
  private held: PendingRow[] = [];
  /** Run rows no file took yet (newest state per run), written with the held events. */
  private heldRuns = new Map<string, RunRow>();
  private readonly group = new GroupCommit<{ runs: readonly RunRow[]; rows: PendingRow[] }>((items) => {
    this.store(
      items.flatMap((i) => i.rows),
      newestPerRun(items),
    );
    // Durable once the WAL is synced, off this thread (walSync.ts); the callers wait for that.
    return this.walSync?.sync();
  });
  /** The fsync of the file's WAL, off the main thread; null when the connection syncs itself (FULL). */
  private walSync: WalSync | null = null;
  private heldLogged = false;
  private database: SpoolStatus['database'] = 'not-configured';
  private lastFlushAt: string | null = null;
  private lastFlushError: string | null = null;
  private readonly listeners = new Set<(change: SpoolChange) => void>();
  private readonly fallbackPath: string;
  private readonly now: () => Date;
  private tick: NodeJS.Timeout | null = null;
  /** Bumped on every (re)open: a flush holding seqs of another file must not delete by them here. */
  private generationNo = 0;

  constructor(private readonly options: SpoolOptions) {
    this.fallbackPath = options.fallbackPath ?? defaultFallbackSpool();
    this.now = options.now ?? (() => new Date());
    this.open();
    this.tick = setInterval(() => this.maintain(), TICK_MS);
    // The check alone must not keep a process (the CLI, a test) alive.
    this.tick.unref();
  }

  /**
   * Stores run rows and events in one transaction, group-committed with every other commit made
   * during this turn of the event loop (one fsync for all); resolves once that transaction is
   * durable, or once what no file took is held in memory (see status: held, RunStore health).
   */
  commit(runs: readonly RunRow[], events: readonly NewTelemetryEvent[], nextTurn = false): Promise<void> {
    return this.group.add({ runs, rows: events.map((e) => this.toPending(e)) }, nextTurn);
  }

  /** Run rows not in a file yet: queued for the next group commit or held in memory, oldest first. */
  unsavedRuns(): RunRow[] {
    return [...this.heldRuns.values(), ...this.group.queued().flatMap((i) => i.runs)];
  }

  /** The newest unsaved row of one run (queued for the next commit, else held in memory); null when none. */
  unsavedRun(runId: string): RunRow | null {
    const queued = this.group.queued();
    for (let i = queued.length - 1; i >= 0; i--) {
      const runs = queued[i].runs;
      for (let j = runs.length - 1; j >= 0; j--) if (runs[j].runId === runId) return runs[j];
    }
    return this.heldRuns.get(runId) ?? null;
  }

  /** A run's state as the file in use has it (its JSON body); null when the file has no such run or none is open. */
  storedRunBody(runId: string): string | null {
    return (this.statements?.runBody.pluck().get(runId) as string | undefined) ?? null;
  }

  /** Number of runs whose newest state is held in memory because no file takes it. */
  get heldRunCount(): number {
    return this.heldRuns.size;
  }

  /** Reads (or writes outside a group commit) on the file in use; null while none is open. */
  withDatabase<T>(fn: (db: Database.Database) => T): T | null {
    const db = this.opened?.db;
    return db === undefined ? null : fn(db);
  }

  /** Stores the event durably; returns its id, or null when it was lost (counted, logged, in status). */
  emit(event: NewTelemetryEvent): string | null {
    // After what is queued for the group commit: a run's events stay in order.
    this.group.flushNow();
    try {
      return this.store([this.toPending(event)])[0];
    } catch (err) {
      return this.lose(null, err);
    } finally {
      this.walSync?.syncNow();
    }
  }

  /** Stores many events in one transaction (one fsync), for bulk producers; returns the ids, like emit. */
  emitMany(events: readonly NewTelemetryEvent[]): Array<string | null> {
    this.group.flushNow();
    try {
      return this.store(events.map((e) => this.toPending(e)));
    } catch (err) {
      return events.map(() => this.lose(null, err));
    } finally {
      this.walSync?.syncNow();
    }
  }

  status(): SpoolHealth {
    let counts = { pending: 0, quarantined: 0, oldestAgeSeconds: null as number | null };
    if (this.statements !== null) {
      try {
        counts = readCounts(this.statements);
        // Another process (a CLI flush) may have flushed this spool: its record is the newest.
        this.lastFlushAt = this.meta('lastFlushAt') ?? this.lastFlushAt;
        const storedError = this.meta('lastFlushError');
        if (storedError !== undefined) this.lastFlushError = storedError === '' ? null : storedError;
      } catch (err) {
        this.recover(err);
      }
    }
    const heldNote = this.held.length === 0 ? null : `${this.held.length} events held in memory: no spool file takes them now`;
    return {
      path: this.opened?.path ?? null,
      fallback: this.opened?.fallback ?? false,
      pending: counts.pending + this.held.length,
      oldestAgeSeconds: counts.oldestAgeSeconds,
      lastFlushAt: this.lastFlushAt,
      lastFlushError: this.lastFlushError,
      lost: this.lost,
      database: this.database,
      error: [heldNote, this.openError].filter((e) => e !== null).join('; ') || null,
      quarantined: counts.quarantined,
      held: this.held.length,
    };
  }

  /** The file in use, or null while events are held in memory or lost. */
  get path(): string | null {
    return this.opened?.path ?? null;
  }

  /** Changes whenever the file in use changes; see deleteThrough. */
  get generation(): number {
    return this.generationNo;
  }

  pending(): number {
    try {
      return this.statements === null ? 0 : (this.statements.pending.pluck().get() as number);
    } catch (err) {
      if (!this.recover(err)) this.options.logger.warn({ err: errorText(err) }, 'cannot count the spooled events');
      return 0;
    }
  }

  /** The oldest `limit` events, in spool order. */
  readBatch(limit: number): SpooledEvent[] {
    return this.statements === null ? [] : readBatch(this.statements, limit);
  }

  /** The oldest `limit` events as columns, the shape the flush sends them in (see readColumns). */
  readColumns(limit: number): SpoolColumns {
    return readColumns(this.statements, limit);
  }

  /**
   * Removes every event up to `seq`; called only after PostgreSQL committed them. With `generation`
   * (read before the batch), nothing is removed when the spool switched files meanwhile.
   */
  deleteThrough(seq: number, generation = this.generationNo): void {
    if (generation !== this.generationNo) return;
    this.statements?.deleteThrough.run(seq);
  }

  /**
   * Moves events the flush cannot send (invalid, or refused by PostgreSQL) to the quarantine table,
   * with a reason, so the events behind them flow. Nothing when the spool switched files meanwhile.
   */
  quarantine(items: ReadonlyArray<{ seq: number; reason: string }>, generation = this.generationNo): void {
    const statements = this.statements;
    const db = this.opened?.db;
    if (items.length === 0 || statements === null || db === undefined || generation !== this.generationNo) return;
    quarantineRows(db, statements, items);
    this.options.logger.error(
      { path: this.path, quarantined: items.map((i) => i.seq), reasons: [...new Set(items.map((i) => i.reason))] },
      `${items.length} telemetry events could not be sent and were moved to the spool's quarantine table`,
    );
    this.notify('quarantine');
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

  /**
   * Checks the file (deleted or replaced under us?), returns to the configured file when it works
   * again (moving the fallback's events into it), and writes events held in memory. Runs every second
   * and before each write; the flusher calls it before each flush.
   */
  maintain(): void {
    try {
      if (this.opened !== null && this.replacedUnderUs()) this.rescue();
      const onFallback = this.opened === null || this.opened.fallback;
      // A short wait only: this runs on the agent's thread, and the next try is seconds away.
      if (onFallback && Date.now() - this.lastOpenAttempt >= (this.options.reopenIntervalMs ?? 5_000)) this.open(REOPEN_BUSY_WAIT_MS);
      if ((this.held.length > 0 || this.heldRuns.size > 0) && this.opened !== null) this.writeHeld();
    } catch (err) {
      this.options.logger.warn({ err: errorText(err) }, 'telemetry spool upkeep failed; trying again');
    }
  }

  /** Writes what is still held in memory (waiting up to closeWaitMs), then closes the file. */
  close(): void {
    if (this.tick !== null) clearInterval(this.tick);
    this.tick = null;
    this.group.flushNow();
    this.settleHeld(this.options.closeWaitMs ?? 60_000);
    this.listeners.clear();
    this.closeFile();
  }

  /**
   * Tries for up to `waitMs` to write the events held in memory; what is still held then is counted
   * lost. Returns that number. For a process about to end (close, a script's emit).
   */
  settleHeld(waitMs: number): number {
    const deadline = Date.now() + waitMs;
    for (;;) {
      this.maintain();
      if ((this.held.length === 0 && this.heldRuns.size === 0) || Date.now() >= deadline) break;
      this.lastOpenAttempt = 0;
      sleepSync(200);
    }
    const gone = this.held.splice(0);
    for (const row of gone) this.lose(row.eventId, new Error(`no spool file took the event within ${waitMs} ms`));
    if (this.heldRuns.size > 0)
      this.options.logger.error(
        { runs: this.heldRuns.size },
        `the newest state of ${this.heldRuns.size} runs could not be stored within ${waitMs} ms; the next agent finds them from their status files`,
      );
    this.heldRuns.clear();
    return gone.length;
  }

  private toPending(event: NewTelemetryEvent): PendingRow {
    return { ...toSpoolRow(event, this.now()), spooledMs: Date.now() };
  }

  /** Writes rows (and run rows) behind anything held, in order; returns their ids (null for rows lost). */
  private store(rows: PendingRow[], runs: readonly RunRow[] = []): Array<string | null> {
    this.maintain();
    for (let attempt = 0; attempt < 2; attempt += 1) {
      if (this.held.length > 0 || this.heldRuns.size > 0 || this.opened === null) break;
      try {
        this.write(rows, runs);
        this.notify('emit');
        return rows.map((r) => r.eventId);
      } catch (err) {
        this.afterWriteFailure(err);
      }
    }
    for (const run of runs) this.heldRuns.set(run.runId, run);
    return this.hold(rows);
  }

  private write(rows: readonly PendingRow[], runs: readonly RunRow[]): void {
    const db = this.opened?.db;
    if (db === undefined) throw new Error('no spool file');
    insertRows(db, rows, { insert: this.statements?.insert, upsertRun: this.statements?.upsertRun }, runs);
  }

  /** Decides what a failed write means: corruption (new file), busy (wait: hold), else the fallback. */
  private afterWriteFailure(err: unknown): void {
    if (this.recover(err)) return;
    // Deleted between the check and the write (SQLite then says SQLITE_READONLY_DBMOVED): carry its events over.
    if (this.opened !== null && this.replacedUnderUs()) {
      this.rescue();
      return;
    }
    if (isBusyError(err)) {
      this.options.logger.warn(
        { path: this.path, err: errorText(err) },
        'telemetry spool busy for long; holding events in memory until it is free',
      );
      return;
    }
    const failed = this.opened;
    if (failed === null) return;
    const message = `telemetry spool ${failed.path} cannot be written: ${errorText(err)}`;
    this.options.logger.error({ path: failed.path, err: errorText(err) }, message);
    this.closeFile();
    // A full or read-only configured file: the fallback (if that is what failed, memory).
    const result = openSpoolDatabase(
      this.options.path,
      this.fallbackPath,
      this.options.logger,
      this.now,
      failed.fallback ? 'none' : 'fallback',
    );
    this.lastOpenAttempt = Date.now();
    this.adopt(result.opened);
    this.openError = [message, result.error].filter((e) => e !== null).join('; ');
    this.notify('error');
  }

  private hold(rows: PendingRow[]): Array<string | null> {
    const room = Math.max(0, (this.options.heldMax ?? 100_000) - this.held.length);
    const kept = rows.slice(0, room);
    this.held.push(...kept);
    if (!this.heldLogged && kept.length > 0) {
      this.heldLogged = true;
      this.options.logger.error(
        { held: this.held.length, err: this.openError },
        'telemetry events held in memory: no spool file takes them now; retrying every second',
      );
    }
    this.notify('error');
    return [
      ...kept.map((r) => r.eventId),
      ...rows.slice(room).map((r) => this.lose(r.eventId, new Error('too many events held in memory'))),
    ];
  }

  private writeHeld(): void {
    const rows = this.held;
    const runs = [...this.heldRuns.values()];
    try {
      this.write(rows, runs);
    } catch (err) {
      this.afterWriteFailure(err);
      return;
    }
    this.held = [];
    this.heldRuns = new Map();
    this.heldLogged = false;
    this.options.logger.warn(
      { path: this.path, written: rows.length },
      `${rows.length} telemetry events held in memory are now in the spool`,
    );
    this.notify('emit');
  }

  private open(busyWaitMs?: number): void {
    this.lastOpenAttempt = Date.now();
    const previous = this.opened;
    const result = openSpoolDatabase(
      this.options.path,
      this.fallbackPath,
      this.options.logger,
      this.now,
      previous?.fallback === true ? 'primary' : 'both',
      busyWaitMs,
    );
    if (previous !== null && result.opened === null) return; // still on the fallback
    if (previous !== null) this.closeFile();
    this.adopt(result.opened);
    if (result.opened?.fallback === false) {
      try {
        drainFallback(result.opened.db, this.fallbackPath, this.options.logger);
      } catch (err) {
        this.options.logger.error({ err: errorText(err) }, 'cannot move the fallback spool into the configured one; trying again later');
      }
    }
    if (result.error !== null || this.openError !== null) {
      this.openError = result.error;
      this.notify('error');
    }
  }

  /** Moves the fallback's events into the configured file; for the flusher, before each flush. */
  drainFallback(): void {
    if (this.opened === null || this.opened.fallback) return;
    try {
      drainFallback(this.opened.db, this.fallbackPath, this.options.logger);
    } catch (err) {
      this.options.logger.error({ err: errorText(err) }, 'cannot move the fallback spool into the configured one; trying again later');
    }
  }

  private adopt(opened: OpenedSpool | null): void {
    this.walSync?.close();
    this.walSync =
      opened === null
        ? null
        : WalSync.open(opened.db, opened.path, (err) => {
            this.options.logger.error(
              { path: opened.path, err: errorText(err) },
              "cannot sync the telemetry spool's WAL to disk: recent events may not survive a power loss",
            );
            this.openError = `cannot sync ${opened.path}-wal: ${errorText(err)}`;
            this.notify('error');
          });
    this.opened = opened;
    this.statements = opened === null ? null : prepareStatements(opened.db);
    this.identity = opened === null ? [] : ['', '-wal', '-shm'].map((suffix) => [opened.path + suffix, identityOf(opened.path + suffix)]);
    this.generationNo += 1;
  }

  private closeFile(): void {
    const db = this.opened?.db;
    this.adopt(null);
    try {
      db?.close();
    } catch (err) {
      this.options.logger.warn({ err: errorText(err) }, 'closing the telemetry spool failed');
    }
  }

  private replacedUnderUs(): boolean {
    return this.identity.some(([file, id]) => id !== null && identityOf(file) !== id);
  }

  /**
   * The file (or its -wal/-shm) was deleted or replaced while open: what it holds is still readable
   * through our handle. Copy it out, open the path anew and write it there (skipping rows already in
   * a file that is still the same), so nothing is lost and the flusher finds it.
   */
  private rescue(): void {
    const old = this.opened;
    if (old === null) return;
    let rows: PendingRow[] = [];
    try {
      rows = readAllRows(old.db);
      // Held states are newer than the file's.
      this.heldRuns = new Map([...readAllRuns(old.db).map((r): [string, RunRow] => [r.runId, r]), ...this.heldRuns]);
    } catch (err) {
      this.options.logger.error({ path: old.path, err: errorText(err) }, 'cannot read the events of a spool file deleted under us');
    }
    const message = `telemetry spool ${old.path} was deleted or replaced while in use; reopened it and carried ${rows.length} pending events over`;
    this.options.logger.error({ path: old.path, carried: rows.length }, message);
    this.closeFile();
    this.held = [...rows, ...this.held];
    this.open();
    this.openError = message + (this.openError === null ? '' : `; ${this.openError}`);
    this.notify('error');
  }

  /** A corrupt spool discovered after opening: move it aside and start a new one; false if not corruption. */
  private recover(err: unknown): boolean {
    if (!isCorruptionError(err) || this.opened === null) return false;
    const file = this.opened.path;
    this.closeFile();
    try {
      const aside = moveAside(file, this.now());
      this.options.logger.error(
        { path: file, movedTo: aside, err: errorText(err) },
        'telemetry spool became corrupt; moved aside, starting a new one',
      );
    } catch (moveErr) {
      this.options.logger.error({ path: file, err: errorText(moveErr) }, 'telemetry spool is corrupt and cannot be moved aside');
    }
    this.open();
    this.openError =
      `telemetry spool ${file} was corrupt (${errorText(err)}) and was moved aside` +
      (this.openError === null ? '' : `; ${this.openError}`);
    this.notify('error');
    return true;
  }

  private lose(eventId: string | null, err: unknown): null {
    this.lost += 1;
    const every = this.options.lostLogEvery ?? 100;
    if (this.lost === 1 || this.lost % every === 0) {
      this.options.logger.error(
        { lost: this.lost, eventId, err: errorText(err) },
        `telemetry event lost: the spool cannot store it (${this.lost} lost so far)`,
      );
    }
    this.notify('lost');
    return null;
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

/**
 * A run's row is its whole state, so of the moves one commit holds for a run (a queued run's enqueue
 * and its first wait come in one turn) only the newest is written.
 */
function newestPerRun(items: ReadonlyArray<{ runs: readonly RunRow[] }>): RunRow[] {
  const newest = new Map<string, RunRow>();
  for (const item of items) for (const run of item.runs) newest.set(run.runId, run);
  return [...newest.values()];
}
