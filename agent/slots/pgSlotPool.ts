import type * as net from 'node:net';
import type { SlotState } from '../../shared/protocol';
import { RunRefusedError } from '../errors';
import type { Logger } from '../log/logger';
import type { OwnerRecord } from './ownerRecord';
import type { PgSlotBackend } from './pgSlotBackend';
import { poolState } from './pgSlotSql';
import { slotBackendCause, type SlotBackendCause } from './slotBackendCause';
import type { PoolBackend, PoolGrant } from './poolBackend';
import type { TakeHandlers } from './pgStationKeeper';

/** How often waiting runs look at the shared queue: other stations' releases send us no signal. */
const POLL_MS = 100;
/**
 * After a keeper could not connect (the server at its connection cap, or down), the first wait before
 * the next try, doubled on each failure up to the last: a try costs a process and a connection attempt.
 */
const KEEPER_RETRY_FIRST_MS = 200;
const KEEPER_RETRY_MAX_MS = 2_000;

export interface PgSlotPoolOptions {
  name: string;
  /** This station's default, used only to seed core.pool; the shared row decides. */
  defaultSize: number;
  waitTimeoutSeconds: number;
  backend: PgSlotBackend;
  logger: Logger;
  pollMs?: number;
  /** A run's slot session was lost: its keeper has killed the run's process group. */
  onLost?(runId: string, why: string): void;
}

interface Waiter {
  runId: string;
  ticket: string | null;
  /** The backend connection the ticket was taken on: a new one means the ticket is gone. */
  generation: number;
  /** The keeper's take under way for it: aborting it gives up the take (and a slot it got). */
  trying: AbortController | null;
  position: number;
  resolve(slot: PoolGrant): void;
  reject(err: Error): void;
  onPosition(position: number): void;
  onBlocked(cause: SlotBackendCause): void;
  cleanup(): void;
}

/**
 * A pool whose slots are PostgreSQL session advisory locks shared by every station. Waiters
 * of all stations take tickets in core.slot_waiter and are served in ticket order: a waiter may try
 * only while fewer live tickets are ahead of it than slots are free. The try is a take of the
 * station's lock keeper (pgSlotKeeper.ts, one process for all the station's slots), which takes the lock
 * on a session of its own and keeps it for as long as the run's processes hold that slot's lifeline (their fd 3).
 */
export class PgSlotPool implements PoolBackend {
  readonly name: string;
  readonly waitTimeoutSeconds: number;
  private readonly waiters: Waiter[] = [];
  private timer: NodeJS.Timeout | null = null;
  private ticking = false;
  private again = false;
  private closed = false;
  private lastError: string | null = null;
  /** Runs whose slot keeper still lives: their slot stays ours between the run's end and the release. */
  private readonly kept = new Set<string>();
  /** Why the agent's own connection cannot read the queue now, or null. */
  private connectionBlocked: SlotBackendCause | null = null;
  /** Why the last keeper could not connect, or null once one did; no keeper starts before `keeperRetryAt`. */
  private keeperBlocked: SlotBackendCause | null = null;
  private keeperRetryAt = 0;
  private keeperRetryMs = 0;
  /** What the waiters were last told: a slot-backend cause, or null (their queue positions). */
  private told: SlotBackendCause | null = null;

  constructor(private readonly opts: PgSlotPoolOptions) {
    this.name = opts.name;
    this.waitTimeoutSeconds = opts.waitTimeoutSeconds;
  }

  get size(): number {
    return this.opts.backend.pool(this.name)?.slots ?? this.opts.defaultSize;
  }

  acquire(
    runId: string,
    signal: AbortSignal,
    onPosition: (position: number) => void = () => {},
    onBlocked: (cause: SlotBackendCause) => void = () => {},
  ): Promise<PoolGrant> {
    return new Promise<PoolGrant>((resolve, reject) => {
      if (signal.aborted) {
        reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
        return;
      }
      const leave = (err: Error) => {
        this.remove(waiter);
        reject(err);
      };
      const timer = setTimeout(
        () => leave(new RunRefusedError('wait-timeout', `no ${this.name} slot became free within ${this.waitTimeoutSeconds} s`)),
        this.waitTimeoutSeconds * 1000,
      );
      timer.unref();
      const onAbort = () => leave(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
      signal.addEventListener('abort', onAbort, { once: true });
      const waiter: Waiter = {
        runId,
        ticket: null,
        generation: -1,
        trying: null,
        position: 0,
        resolve,
        reject,
        onPosition,
        onBlocked,
        cleanup: () => {
          clearTimeout(timer);
          signal.removeEventListener('abort', onAbort);
        },
      };
      this.waiters.push(waiter);
      if (this.told === null) onPosition(this.waiters.length);
      else onBlocked(this.told);
      this.kick();
    });
  }

  released(): void {
    void this.opts.backend.refresh();
    this.kick();
  }

  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    for (const w of [...this.waiters]) {
      this.remove(w);
      w.reject(new RunRefusedError('agent-stopping', 'the agent is stopping'));
    }
  }

  state(isOwnRun: (runId: string) => boolean): SlotState[] {
    const holders = this.opts.backend.holdersOf(this.name);
    const top = Math.max(this.size, ...holders.map((h) => h.slot + 1));
    return Array.from({ length: top }, (_, index) => {
      const h = holders.find((x) => x.slot === index);
      return {
        pool: this.name,
        index,
        lockPath: `postgres:core.pool/${this.name}/${index}`,
        holder: h
          ? {
              pid: h.pid ?? h.keeperPid,
              runId: h.runId,
              fetcher: h.fetcher,
              since: h.since,
              foreign: !(h.runId && (isOwnRun(h.runId) || this.kept.has(h.runId))),
              station: h.station,
            }
          : null,
      };
    });
  }

  /** Gives the waiter's place back: its keeper (if trying) is stopped, its ticket deleted. */
  private remove(waiter: Waiter): void {
    const at = this.waiters.indexOf(waiter);
    if (at >= 0) this.waiters.splice(at, 1);
    if (this.waiters.length === 0) this.forgetKeeperFailure();
    waiter.cleanup();
    if (waiter.trying) {
      waiter.trying.abort();
      waiter.trying = null;
    }
    this.dropTicket(waiter);
  }

  private dropTicket(waiter: Waiter): void {
    const ticket = waiter.ticket;
    waiter.ticket = null;
    if (ticket === null) return;
    this.opts.backend
      .use((c) => c.query('DELETE FROM core.slot_waiter WHERE ticket = $1::bigint', [ticket]))
      .catch(() => {
        /* a lost connection took the ticket with it */
      });
  }

  private kick(): void {
    if (this.closed) return;
    if (this.ticking) {
      this.again = true;
      return;
    }
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.ticking = true;
    this.tick()
      .catch((err: unknown) => {
        const message = (err as Error).message;
        if (message !== this.lastError)
          this.opts.logger.warn({ pool: this.name, err: message }, 'cannot reach the slot database: no new slots until it is back');
        this.lastError = message;
        // Whatever stops the queue from being read, the runs wait for it (as in an outage) and say why.
        this.connectionBlocked = slotBackendCause(err as Error) ?? 'unreachable';
        this.tell();
      })
      .finally(() => {
        this.ticking = false;
        if (this.waiters.length === 0) this.forgetKeeperFailure();
        if (this.closed || this.waiters.length === 0) return;
        if (this.again) {
          this.again = false;
          this.kick();
          return;
        }
        const poll = this.opts.pollMs ?? POLL_MS;
        this.timer = setTimeout(
          () => {
            this.timer = null;
            this.kick();
          },
          Math.max(poll, this.keeperRetryAt - Date.now()),
        );
        this.timer.unref();
      });
  }

  /** One look at the shared queue: tickets for newcomers, then a keeper for each waiter whose turn it is. */
  private async tick(): Promise<void> {
    if (this.waiters.length === 0) return;
    const { backend } = this.opts;
    const { pool, held, queue } = await backend.use(async (client) => {
      const newcomers = this.waiters.filter((w) => w.ticket === null || w.generation !== backend.generation);
      const state = await poolState(client, this.name, {
        station: backend.station,
        agentPid: process.pid,
        runIds: newcomers.map((w) => w.runId),
      });
      const dropped = new Set<string>();
      for (const w of newcomers) {
        const ticket = state.tickets.get(w.runId) ?? null;
        if (!this.waiters.includes(w)) {
          // It left (cancel, timeout) while its ticket was being made: the ticket must not hold up the queue.
          if (ticket !== null) {
            await client.query('DELETE FROM core.slot_waiter WHERE ticket = $1::bigint', [ticket]);
            dropped.add(ticket);
          }
          continue;
        }
        w.ticket = ticket;
        w.generation = backend.generation;
      }
      return {
        pool: { slots: state.slots, lockKey: state.lockKey },
        held: state.held,
        queue: state.queue.filter((t) => !dropped.has(t)),
      };
    });
    backend.setPool(this.name, pool);
    this.lastError = null;
    this.connectionBlocked = null;
    this.tell();
    const free = pool.slots - held.length;
    const keepersMayStart = Date.now() >= this.keeperRetryAt;
    for (const w of [...this.waiters]) {
      const rank = w.ticket === null ? -1 : queue.indexOf(w.ticket);
      if (rank < 0) continue;
      if (rank + 1 !== w.position) {
        w.position = rank + 1;
        if (this.told === null) w.onPosition(w.position);
      }
      if (rank < free && w.trying === null && keepersMayStart) this.tryKeeper(w);
    }
  }

  /**
   * Tells the waiters when the reason they wait changes: the slot database (its connection cap, or an
   * outage), then again their place in the queue once a connection works.
   */
  private tell(): void {
    const cause = this.connectionBlocked ?? this.keeperBlocked;
    if (cause === this.told) return;
    this.told = cause;
    for (const w of this.waiters) {
      if (cause !== null) w.onBlocked(cause);
      else if (w.position > 0) w.onPosition(w.position);
    }
  }

  /** A keeper connected (it took a slot or found the pool full): keepers start freely again. */
  private keeperConnected(): void {
    this.keeperRetryMs = 0;
    this.keeperRetryAt = 0;
    if (this.keeperBlocked === null) return;
    this.opts.logger.info({ pool: this.name }, 'slot keepers connect again');
    this.keeperBlocked = null;
    this.opts.backend.keepersCannotConnect(this.name, null);
    this.tell();
  }

  /** Nobody waits: a keeper's failure says nothing about the next one (status stops showing it). */
  private forgetKeeperFailure(): void {
    if (this.keeperBlocked === null) return;
    this.keeperBlocked = null;
    this.keeperRetryAt = 0;
    this.keeperRetryMs = 0;
    this.opts.backend.keepersCannotConnect(this.name, null);
    this.told = this.connectionBlocked;
  }

  /** A keeper could not connect for a cause that passes: the waiter waits on, the next try later. */
  private keeperCannotConnect(cause: SlotBackendCause, message: string): void {
    // Keepers started together fail together: one failure per try doubles the wait, not each of them.
    if (Date.now() >= this.keeperRetryAt) {
      this.keeperRetryMs = Math.min(KEEPER_RETRY_MAX_MS, Math.max(KEEPER_RETRY_FIRST_MS, this.keeperRetryMs * 2));
      this.keeperRetryAt = Date.now() + this.keeperRetryMs;
    }
    if (this.keeperBlocked !== cause) {
      this.opts.logger.warn(
        { pool: this.name, cause, err: message },
        cause === 'connection-cap'
          ? 'slot database at its connection cap: a slot keeper cannot connect; runs wait until a connection is free'
          : 'slot database unreachable: a slot keeper cannot connect; runs wait until it is back',
      );
    }
    this.keeperBlocked = cause;
    this.opts.backend.keepersCannotConnect(this.name, { state: cause, error: message });
    this.tell();
  }

  /**
   * Asks the station's keeper for a slot for the waiter. It answers acquired (the waiter is served) or
   * busy (it waits on); a keeper that cannot connect for a passing cause makes the waiter wait on too.
   */
  private tryKeeper(waiter: Waiter): void {
    const trying = new AbortController();
    waiter.trying = trying;
    const handlers = {
      onLost: (why: string) => {
        this.opts.logger.warn(
          { pool: this.name, runId: waiter.runId, why },
          "slot-session-lost: the slot's PostgreSQL session ended; its keeper stopped the run",
        );
        this.opts.onLost?.(waiter.runId, why);
      },
      onReleased: () => {},
    };
    void this.opts.backend.keeper.take(this.name, waiter.runId, handlers, trying.signal).then((answer) => {
      if (waiter.trying !== trying) {
        // Given up meanwhile: closing the lifeline frees the slot.
        if ('acquired' in answer) answer.lifeline.destroy();
        return;
      }
      waiter.trying = null;
      if ('acquired' in answer) {
        this.keeperConnected();
        this.served(waiter, answer, handlers);
        return;
      }
      if ('busy' in answer) {
        this.keeperConnected();
        this.kick();
        return;
      }
      if (answer.code === 'keeper-gone') {
        this.kick();
        return;
      }
      const cause = slotBackendCause(answer);
      if (cause === null) {
        this.remove(waiter);
        waiter.reject(new RunRefusedError('slot-backend-unavailable', `the slot keeper failed: ${answer.error}`));
      } else {
        this.keeperCannotConnect(cause, answer.error);
        this.kick();
      }
    });
  }

  private served(waiter: Waiter, answer: { acquired: number; lifeline: net.Socket; id: string }, handlers: TakeHandlers): void {
    const { acquired: index, lifeline, id } = answer;
    if (!this.waiters.includes(waiter)) {
      lifeline.destroy();
      return;
    }
    const at = this.waiters.indexOf(waiter);
    this.waiters.splice(at, 1);
    waiter.cleanup();
    this.dropTicket(waiter);
    const { keeper } = this.opts.backend;
    let keptRun: string | null = null;
    // When the keeper releases the slot (the lifeline's last holder is gone, or the keeper ended), so
    // does the agent's copy of the lifeline, if it still has one: its fd getter then says the session is gone.
    handlers.onReleased = () => {
      lifeline.destroy();
      if (keptRun !== null) this.kept.delete(keptRun);
    };
    lifeline.unref();
    const fd = (lifeline as unknown as { _handle?: { fd?: number } })._handle?.fd;
    if (typeof fd !== 'number' || fd < 0) {
      lifeline.destroy();
      waiter.reject(new RunRefusedError('slot-error', "the slot keeper's lifeline has no descriptor"));
      return;
    }
    let closed = false;
    waiter.resolve({
      index,
      lock: {
        get fd(): number {
          if (lifeline.destroyed) throw new RunRefusedError('slot-session-lost', `the keeper of ${index} ended before the run started`);
          return fd;
        },
        writeRecord: (record: OwnerRecord) => {
          // A record of the agent itself (in-agent work) names no process group the keeper may kill.
          const group = record.pid === process.pid ? null : record.pid;
          if (record.runId && keeper.holds(id)) {
            keptRun = record.runId;
            this.kept.add(record.runId);
          }
          keeper.record(id, { pid: group, fetcher: record.fetcher, runId: record.runId, since: record.since });
        },
        closeOwnCopy: () => {
          if (closed) return;
          closed = true;
          lifeline.destroy();
        },
      },
    });
  }
}
