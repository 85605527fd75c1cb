import { spawn, type ChildProcess } from 'node:child_process';
import * as os from 'node:os';
import type { OperatorEvent } from '../../shared/protocol';
import type { Logger } from '../log/logger';

export interface EventHookOptions {
  /** QUANTILICA_ON_EVENT: an absolute path, checked at start (checkEventHook). */
  program: string;
  logger: Logger;
  /** Hooks running at once (default 4). */
  maxRunning?: number;
  /** Events waiting for a free run (default 100); past it the oldest is dropped. */
  maxQueued?: number;
  /** A hook still running after this long is killed with its process group (default 30 s). */
  timeoutMs?: number;
  /** Failures and drops are logged at most once per this period, with their count (default 60 s). */
  logPeriodMs?: number;
}

/** The only variables a hook gets besides the event's: never the agent's own environment (its secrets). */
function baseEnv(): Record<string, string> {
  return { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: process.env.HOME ?? os.homedir(), LANG: process.env.LANG ?? 'C.UTF-8' };
}

export function hookEnv(event: OperatorEvent): Record<string, string> {
  const text = (v: string | number | null) => (v === null ? '' : String(v));
  return {
    ...baseEnv(),
    QUANTILICA_EVENT: event.event,
    QUANTILICA_RUN_ID: text(event.runId),
    QUANTILICA_FETCHER: text(event.fetcher),
    QUANTILICA_POOL: text(event.pool),
    QUANTILICA_EXIT_CODE: text(event.exitCode),
    QUANTILICA_REASON: text(event.reason),
    QUANTILICA_ATTEMPT: text(event.attempt),
    QUANTILICA_LOG_PATH: text(event.logPath),
  };
}

/**
 * Runs the operator's hook program for each event: no shell, no arguments, a minimal environment, its
 * own process group, a bounded time, a bounded number at once and a bounded queue. It never waits
 * for a hook and never retries one: a hook that hangs or fails costs the runs nothing, and its
 * trouble is logged at most once a period.
 */
export class EventHook {
  private readonly queue: OperatorEvent[] = [];
  private readonly running = new Set<ChildProcess>();
  private readonly maxRunning: number;
  private readonly maxQueued: number;
  private readonly timeoutMs: number;
  private readonly logPeriodMs: number;
  private lastLog = -Infinity;
  private unlogged = { failed: 0, dropped: 0, last: '' };
  private closed = false;
  private logTimer: NodeJS.Timeout | null = null;

  constructor(private readonly options: EventHookOptions) {
    this.maxRunning = options.maxRunning ?? 4;
    this.maxQueued = options.maxQueued ?? 100;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.logPeriodMs = options.logPeriodMs ?? 60_000;
  }

  /** Queues the event and returns at once; the hook starts on a later turn of the event loop. */
  send(event: OperatorEvent): void {
    if (this.closed) return;
    this.queue.push(event);
    // Those a free run takes on the next turn are not waiting: only the rest count against the bound.
    const free = Math.max(0, this.maxRunning - this.running.size);
    if (this.queue.length - free > this.maxQueued) {
      const [dropped] = this.queue.splice(free, 1);
      this.trouble(
        'dropped',
        `queue full (${this.maxQueued}): dropped the oldest event ${dropped?.event ?? ''}${dropped?.fetcher ? ` of ${dropped.fetcher}` : ''}`,
      );
    }
    setImmediate(() => this.drain());
  }

  /** Hooks running now (for tests and status). */
  runningCount(): number {
    return this.running.size;
  }

  /** Stops taking events; hooks still running are killed (the agent does not wait 30 s to stop). */
  close(): void {
    this.closed = true;
    this.queue.length = 0;
    for (const child of this.running) killGroup(child);
    this.flushLog();
  }

  private drain(): void {
    while (!this.closed && this.running.size < this.maxRunning && this.queue.length > 0) {
      this.start(this.queue.shift() as OperatorEvent);
    }
  }

  private start(event: OperatorEvent): void {
    const { program } = this.options;
    let child: ChildProcess;
    try {
      child = spawn(program, [], { env: hookEnv(event), detached: true, stdio: 'ignore', cwd: '/' });
    } catch (err) {
      this.trouble('failed', `cannot start ${program} for ${event.event}: ${String(err)}`);
      return;
    }
    this.running.add(child);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup(child);
    }, this.timeoutMs);
    timer.unref();
    let ended = false;
    const end = (problem: string | null) => {
      if (ended) return;
      ended = true;
      clearTimeout(timer);
      this.running.delete(child);
      if (problem !== null)
        this.trouble('failed', `${program} for ${event.event}${event.fetcher ? ` of ${event.fetcher}` : ''}: ${problem}`);
      this.drain();
    };
    child.once('error', (err: NodeJS.ErrnoException) => end(`cannot run (${err.code ?? err.message})`));
    child.once('exit', (code, signal) => {
      if (timedOut) end(`killed after ${Math.round(this.timeoutMs / 1000)} s`);
      else if (signal !== null) end(`ended by ${signal}`);
      else end(code === 0 ? null : `exited ${code}`);
    });
  }

  private trouble(kind: 'failed' | 'dropped', message: string): void {
    this.unlogged[kind] += 1;
    this.unlogged.last = message;
    const wait = this.lastLog + this.logPeriodMs - Date.now();
    if (wait <= 0) this.flushLog();
    else this.logTimer ??= setTimeout(() => this.flushLog(), wait).unref();
  }

  private flushLog(): void {
    if (this.logTimer !== null) clearTimeout(this.logTimer);
    this.logTimer = null;
    const { failed, dropped, last } = this.unlogged;
    if (failed === 0 && dropped === 0) return;
    this.lastLog = Date.now();
    this.unlogged = { failed: 0, dropped: 0, last: '' };
    this.options.logger.warn(
      { event: 'event-hook', failed, dropped, reason: dropped > 0 && failed === 0 ? 'hook-queue-full' : 'hook-failed' },
      `event hook: ${failed} failed, ${dropped} dropped since the last report (hooks are never retried); last: ${last}`,
    );
  }
}

function killGroup(child: ChildProcess): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, 'SIGKILL');
  } catch {
    // Already gone.
  }
}
