import { Cron } from 'croner';
import type { Change, ScheduleStatus } from '../../shared/protocol';
import { ConfigError } from '../config/configError';
import { UnknownFetcherError } from '../errors';
import type { Logger } from '../log/logger';
import { systemClock, type Clock, type Timer } from './clock';
import { cronPeriod } from './cronPeriod';
import { lateness, type Lateness } from './lateness';
import { ScheduleStateFile, type PausedState } from './scheduleStateFile';
import type { ScheduleTarget } from './scheduleTarget';

/** The part of a catalog entry the schedule reads (a CatalogEntry fits). */
export interface ScheduledFetcher {
  name: string;
  schedule?: string;
  timezone?: string;
  lateAfterMinutes?: number;
}

export interface ScheduleOptions {
  fetchers: readonly ScheduledFetcher[];
  target: ScheduleTarget;
  logger: Logger;
  /** QUANTILICA_HOME: the pause state is kept in schedule.json there. */
  homeDir: string;
  /** QUANTILICA_SCHEDULE_CATCH_UP. */
  catchUp: boolean;
  hub?: { publish(change: Change): void };
  clock?: Clock;
}

interface Entry {
  name: string;
  pattern: string | null;
  timezone: string | null;
  cron: Cron | null;
  nextDue: Date | null;
  lateAfterMinutes: number | null;
}

/**
 * Timers run on elapsed time, cron on wall time; they part when the clock is stepped or the machine
 * sleeps (a suspended machine's timers do not advance). Waking at least once a minute bounds how
 * late a due run can be after either, at the cost of one cheap comparison loop per minute.
 */
const MAX_TIMER_MS = 60_000;

/** The 24-hour schedule: starts each fetcher when its cron expression falls due. */
export class Schedule {
  private readonly clock: Clock;
  private readonly entries: Entry[];
  private readonly stateFile: ScheduleStateFile;
  private state: PausedState;
  private timer: Timer | null = null;
  private lastTick: Date | null = null;
  private running = false;
  /** Lateness counts from here for an entry that has no run in the history. */
  private readonly openedAt: Date;
  /** The lateness last published, per fetcher: a refresh publishes only when it moved. */
  private publishedLate = new Map<string, string | null>();

  constructor(private readonly options: ScheduleOptions) {
    this.clock = options.clock ?? systemClock;
    this.openedAt = this.clock.now();
    this.entries = compile(options.fetchers);
    this.stateFile = new ScheduleStateFile(options.homeDir, options.logger);
    this.state = this.stateFile.load();
    this.realign(this.clock.now());
  }

  /** Runs the overdue fetchers once (catch-up, unless configured off), then follows the schedule. */
  start(): void {
    if (this.running) return;
    this.running = true;
    const now = this.clock.now();
    this.realign(now);
    if (this.options.catchUp) this.catchUp(now);
    this.lastTick = now;
    this.publish();
    this.arm();
  }

  close(): void {
    this.running = false;
    this.timer?.cancel();
    this.timer = null;
  }

  status(): ScheduleStatus {
    const paused = new Set(this.state.pausedFetchers);
    const now = this.clock.now();
    return {
      paused: this.state.paused,
      catchUp: this.options.catchUp,
      entries: this.entries.map((e) => {
        const success = this.options.target.lastSucceededAt?.(e.name) ?? null;
        return {
          fetcher: e.name,
          cron: e.pattern,
          timezone: e.timezone,
          nextDue: e.nextDue?.toISOString() ?? null,
          paused: paused.has(e.name),
          lastRunAt: this.options.target.lastStartedAt(e.name)?.toISOString() ?? null,
          // Only for entries under a lateness check, and a success only when one is known: an entry
          // without either reads as it always did.
          ...(e.lateAfterMinutes === null
            ? {}
            : { lateAfterMinutes: e.lateAfterMinutes, lateSince: this.lateOf(e, success, now, paused).lateSince?.toISOString() ?? null }),
          ...(success === null ? {} : { lastSuccessAt: success.toISOString() }),
        };
      }),
    };
  }

  /**
   * Publishes the schedule when an entry's lateness moved (a run completed, a deadline passed): the
   * agent calls it when a run of a scheduled fetcher ends, the timer when a deadline falls due.
   */
  refresh(): void {
    if (!this.running) return;
    // Only entries under a lateness check can move, and each costs reads of the run store: a whole
    // status per ended run held the main thread for milliseconds per catalog entry.
    const paused = new Set(this.state.pausedFetchers);
    const now = this.clock.now();
    const moved = this.entries.some(
      (e) =>
        e.lateAfterMinutes !== null &&
        (this.publishedLate.get(e.name) ?? null) !==
          (this.lateOf(e, this.options.target.lastSucceededAt?.(e.name) ?? null, now, paused).lateSince?.toISOString() ?? null),
    );
    if (!moved) return;
    this.publishStatus(this.status());
    this.arm();
  }

  /** A paused entry (or schedule) is not late: the operator stopped it on purpose. */
  private lateOf(e: Entry, success: Date | null, now: Date, paused: Set<string>): Lateness {
    if (e.cron === null || e.lateAfterMinutes === null || this.state.paused || paused.has(e.name)) return { lateSince: null, lateAt: null };
    const knownSince = this.options.target.firstRecordedAt?.(e.name) ?? this.openedAt;
    return lateness({ cron: e.cron, lateAfterMinutes: e.lateAfterMinutes, lastSuccess: success, knownSince, now });
  }

  /**
   * Pauses or resumes one fetcher's schedule, or (without `fetcher`) the whole schedule, and saves
   * that before answering: a pause that a restart forgets would start runs the operator stopped.
   * Occurrences that pass while paused are not made up on resume.
   */
  setPaused(paused: boolean, fetcher?: string): ScheduleStatus {
    const next: PausedState = { paused: this.state.paused, pausedFetchers: [...this.state.pausedFetchers] };
    if (fetcher === undefined) {
      next.paused = paused;
    } else {
      if (!this.entries.some((e) => e.name === fetcher))
        throw new UnknownFetcherError(
          fetcher,
          this.entries.map((e) => e.name),
        );
      next.pausedFetchers = next.pausedFetchers.filter((f) => f !== fetcher);
      if (paused) next.pausedFetchers.push(fetcher);
    }
    this.stateFile.save(next);
    this.state = next;
    this.options.logger.info(
      { event: 'schedule-paused', paused, fetcher: fetcher ?? null },
      `schedule ${paused ? 'paused' : 'resumed'}${fetcher === undefined ? ' (all fetchers)' : ` for ${fetcher}`}`,
    );
    this.publish();
    return this.status();
  }

  private catchUp(now: Date): void {
    for (const e of this.entries) {
      if (e.cron === null) continue;
      const last = this.options.target.lastStartedAt(e.name);
      // Never run (a new fetcher, a fresh install): its first run is its next due time, not a
      // burst of every source at the first start.
      if (last === null) continue;
      const period = cronPeriod(e.cron, now);
      if (period === null || now.getTime() - last.getTime() <= period) continue;
      this.fire(e, 'catch-up', `last run ${last.toISOString()} is older than its period (${Math.round(period / 60_000)} min)`);
      // One run covers an occurrence falling in this very second too.
      if (e.nextDue !== null && e.nextDue.getTime() <= now.getTime()) e.nextDue = e.cron.nextRun(now);
    }
  }

  private tick(): void {
    this.timer = null;
    if (!this.running) return;
    const now = this.clock.now();
    if (this.lastTick !== null && now < this.lastTick) this.realignAfterBackwardStep(now);
    this.lastTick = now;
    const due = this.entries
      .filter((e) => e.nextDue !== null && e.nextDue.getTime() <= now.getTime())
      .sort((a, b) => (a.nextDue?.getTime() ?? 0) - (b.nextDue?.getTime() ?? 0));
    for (const e of due) {
      const at = e.nextDue as Date;
      this.fire(e, 'schedule', `due at ${at.toISOString()}`);
      // From now, not from `at`: after a forward step or a sleep, the missed occurrences give one
      // run, not a burst.
      e.nextDue = e.cron?.nextRun(now) ?? null;
    }
    if (due.length > 0) this.publish();
    else this.refresh();
    this.arm();
  }

  private fire(e: Entry, trigger: 'schedule' | 'catch-up', why: string): void {
    const { target, logger } = this.options;
    const fields = { event: 'schedule', fetcher: e.name, trigger };
    if (this.state.paused || this.state.pausedFetchers.includes(e.name)) {
      logger.info(fields, `schedule: ${e.name} not started (${why}): its schedule is paused${this.state.paused ? ' (globally)' : ''}`);
      return;
    }
    try {
      if (target.isActive(e.name)) {
        const message = `${trigger === 'catch-up' ? 'catch-up' : 'scheduled'} run (${why}) not started: an earlier run of ${e.name} is still running or waiting`;
        logger.info(fields, `schedule: ${message}`);
        target.recordSkipped(e.name, 'already-active', trigger, message);
        return;
      }
      logger.info(fields, `schedule: starting ${e.name} (${trigger}, ${why})`);
      target.enqueue(e.name, trigger);
    } catch (err) {
      // One fetcher's failure to queue must not stop the timer that serves all the others.
      logger.error({ ...fields, err: String(err) }, `schedule: could not queue ${e.name}: ${String(err)}`);
    }
  }

  /** Next due times from `now`, counting an occurrence in the current second as still due. */
  private realign(now: Date): void {
    const from = new Date(now.getTime() - 1000);
    for (const e of this.entries) e.nextDue = e.cron?.nextRun(from) ?? null;
  }

  /**
   * The wall clock went back. A small step (NTP, DST handled by croner) keeps the due times, so
   * an occurrence that already ran is not run again; a due time more than one occurrence ahead
   * of the new `now` (the clock was far ahead before) is brought back, or it would wait for days.
   */
  private realignAfterBackwardStep(now: Date): void {
    for (const e of this.entries) {
      if (e.cron === null || e.nextDue === null) continue;
      const expected = e.cron.nextRun(now);
      const after = expected === null ? null : e.cron.nextRun(expected);
      if (after !== null && e.nextDue.getTime() > after.getTime()) {
        this.options.logger.warn(
          { event: 'schedule-clock', fetcher: e.name },
          `schedule: the clock went back; ${e.name} is next due ${expected?.toISOString()}`,
        );
        e.nextDue = expected;
      }
    }
  }

  private arm(): void {
    if (!this.running) return;
    this.timer?.cancel();
    const now = this.clock.now().getTime();
    let earliest = Infinity;
    for (const e of this.entries) if (e.nextDue !== null) earliest = Math.min(earliest, e.nextDue.getTime());
    // A lateness deadline wakes the schedule too, so `late` is seen when it falls, not up to a minute after.
    const paused = new Set(this.state.pausedFetchers);
    for (const e of this.entries) {
      if (e.lateAfterMinutes === null) continue;
      const lateAt = this.lateOf(e, this.options.target.lastSucceededAt?.(e.name) ?? null, new Date(now), paused).lateAt;
      if (lateAt !== null) earliest = Math.min(earliest, lateAt.getTime());
    }
    const delay = Math.min(MAX_TIMER_MS, Math.max(0, earliest - now));
    this.timer = this.clock.setTimer(() => this.tick(), delay);
  }

  private publish(): void {
    this.publishStatus(this.status());
  }

  private publishStatus(schedule: ScheduleStatus): void {
    this.publishedLate = new Map(schedule.entries.map((e) => [e.fetcher, e.lateSince ?? null]));
    this.options.hub?.publish({ kind: 'schedule', schedule });
  }
}

/** Validates every expression up front and reports all bad ones together, naming the fetcher. */
function compile(fetchers: readonly ScheduledFetcher[]): Entry[] {
  const problems: string[] = [];
  const entries = fetchers.map((f): Entry => {
    const entry: Entry = {
      name: f.name,
      pattern: f.schedule ?? null,
      timezone: f.timezone ?? null,
      cron: null,
      nextDue: null,
      lateAfterMinutes: f.lateAfterMinutes ?? null,
    };
    if (f.schedule === undefined) {
      if (f.lateAfterMinutes !== undefined)
        problems.push(`catalog: fetcher ${f.name}: lateAfterMinutes needs a schedule (lateness counts from its due times)`);
      return entry;
    }
    try {
      // croner reads any string with ":" as a one-off date ("12:00" would run once, not daily).
      if (f.schedule.includes(':')) throw new Error('expected a cron expression of 5 or 6 fields, not a date or time');
      const cron = new Cron(f.schedule, f.timezone === undefined ? {} : { timezone: f.timezone });
      cron.nextRun(); // throws for an unknown time zone
      entry.cron = cron;
    } catch (err) {
      problems.push(
        `catalog: fetcher ${f.name}: schedule ${JSON.stringify(f.schedule)}` +
          `${f.timezone === undefined ? '' : ` timezone ${JSON.stringify(f.timezone)}`}: ${(err as Error).message}`,
      );
    }
    return entry;
  });
  if (problems.length > 0) throw new ConfigError(problems);
  return entries;
}
