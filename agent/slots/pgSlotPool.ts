import { spawn, type ChildProcess } from 'node:child_process';
import type * as net from 'node:net';
import * as readline from 'node:readline';
import type { SlotState } from '../../shared/protocol';
import { RunRefusedError } from '../errors';
import type { Logger } from '../log/logger';
import type { OwnerRecord } from './ownerRecord';
import type { PgSlotBackend } from './pgSlotBackend';
import { heldSlots, readPool } from './pgSlotSql';
import { slotBackendCause, type SlotBackendCause } from './slotBackendCause';
import type { PoolBackend, PoolGrant } from './poolBackend';

/** How often waiting runs look at the shared queue: other stations' releases send us no signal. */
const POLL_MS = 100;
/** How long a keeper may take to start, connect and answer before the try is given up. */
const KEEPER_ANSWER_MS = 30_000;
/** How long a warm spare keeper (a process and a connection) waits for a run before it is stopped. */
const SPARE_IDLE_MS = 30_000;
/**
 * After a keeper could not connect (the server at its connection cap, or down), the first wait before
 * the next try, doubled on each failure up to the last: a try costs a process and a connection attempt.
 */
const KEEPER_RETRY_FIRST_MS = 200;
const KEEPER_RETRY_MAX_MS = 2_000;

interface KeeperMessage {
  acquired?: number;
  busy?: boolean;
  error?: string;
  code?: string;
  lost?: string;
}

/** A keeper process and what its messages and its end mean now (a spare's, then a waiter's). */
interface KeeperHandle {
  child: ChildProcess;
  lifeline: net.Socket;
  onMessage(msg: KeeperMessage): void;
  onExit(): void;
  onError(err: Error): void;
  retire(): void;
}

export interface PgSlotPoolOptions {
  name: string;
  /** This station's default, used only to seed core.pool; the shared row decides. */
  defaultSize: number;
  waitTimeoutSeconds: number;
  backend: PgSlotBackend;
  /** dist/pgSlotKeeper.js */
  keeperPath: string;
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
  keeper: ChildProcess | null;
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
 * only while fewer live tickets are ahead of it than slots are free. The try is a lock keeper process
 * (pgSlotKeeper.ts) that takes the lock on its own session and keeps it for as long as the run's
 * processes hold the keeper's lifeline (their fd 3).
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
  private spare: KeeperHandle | null = null;
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
        keeper: null,
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
    if (this.spare) {
      this.spare.lifeline.destroy();
      this.spare.child.kill('SIGTERM');
      this.spare = null;
    }
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
    if (waiter.keeper) {
      waiter.keeper.kill('SIGTERM');
      waiter.keeper = null;
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
      for (const w of [...this.waiters]) {
        if (w.ticket !== null && w.generation === backend.generation) continue;
        const row = (
          await client.query<{ ticket: string }>(
            'INSERT INTO core.slot_waiter (pool, station, agent_pid, run_id, backend_pid) VALUES ($1, $2, $3, $4, pg_catalog.pg_backend_pid()) RETURNING ticket::text',
            [this.name, backend.station, process.pid, w.runId],
          )
        ).rows[0];
        if (!this.waiters.includes(w)) {
          // It left (cancel, timeout) while its ticket was being made: the ticket must not hold up the queue.
          await client.query('DELETE FROM core.slot_waiter WHERE ticket = $1::bigint', [row?.ticket]);
          continue;
        }
        w.ticket = row?.ticket ?? null;
        w.generation = backend.generation;
      }
      const row = await readPool(client, this.name);
      const locks = await heldSlots(client, row.lockKey);
      const tickets = (
        await client.query<{ ticket: string }>(
          `SELECT w.ticket::text FROM core.slot_waiter w WHERE w.pool = $1
        AND EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid = w.backend_pid) ORDER BY w.ticket`,
          [this.name],
        )
      ).rows.map((r) => r.ticket);
      return { pool: row, held: locks, queue: tickets };
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
      if (rank < free && w.keeper === null && keepersMayStart) this.tryKeeper(w);
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
   * Gives the waiter a lock keeper: the warm spare if there is one, else a new one. It answers acquired
   * (the waiter is served) or busy (it waits on). A new spare is started meanwhile, so the next waiter
   * does not pay for a process start and a connection.
   */
  private tryKeeper(waiter: Waiter): void {
    const handle = this.spare ?? this.startKeeper();
    this.spare = null;
    handle.retire();
    const { child: keeper, lifeline } = handle;
    waiter.keeper = keeper;
    let answered = false;
    const answerTimer = setTimeout(() => {
      if (!answered) keeper.kill('SIGKILL');
    }, KEEPER_ANSWER_MS);
    answerTimer.unref();
    const giveUp = (err: Error | null) => {
      answered = true;
      clearTimeout(answerTimer);
      if (waiter.keeper !== keeper) return;
      waiter.keeper = null;
      lifeline.destroy();
      if (err) {
        this.remove(waiter);
        waiter.reject(err);
      } else {
        this.kick();
      }
    };
    handle.onExit = () => {
      if (!answered) giveUp(null);
    };
    handle.onError = (err) => giveUp(new RunRefusedError('slot-error', `cannot start the slot keeper: ${err.message}`));
    handle.onMessage = (msg) => {
      if (msg.lost !== undefined) {
        this.opts.logger.warn(
          { pool: this.name, runId: waiter.runId, why: msg.lost },
          "slot-session-lost: the slot's PostgreSQL session ended; its keeper stopped the run",
        );
        this.opts.onLost?.(waiter.runId, msg.lost);
        return;
      }
      if (answered) return;
      if (msg.busy) {
        this.keeperConnected();
        giveUp(null);
      } else if (msg.error !== undefined) {
        const cause = slotBackendCause(msg);
        if (cause === null) {
          giveUp(new RunRefusedError('slot-backend-unavailable', `the slot keeper failed: ${msg.error}`));
        } else {
          this.keeperCannotConnect(cause, msg.error);
          giveUp(null);
        }
      } else if (typeof msg.acquired === 'number') {
        this.keeperConnected();
        this.served(waiter, keeper, lifeline, msg.acquired, () => {
          answered = true;
          clearTimeout(answerTimer);
        });
      }
    };
    keeper.stdin?.write(`${JSON.stringify({ take: waiter.runId })}\n`);
    this.warmSpare();
  }

  /** A keeper started ahead of need: connected and idle until it is told which run it takes a slot for. */
  private warmSpare(): void {
    if (this.closed || this.spare !== null) return;
    const spare = this.startKeeper();
    this.spare = spare;
    const drop = () => {
      if (this.spare !== spare) return;
      this.spare = null;
      clearTimeout(idle);
      spare.lifeline.destroy();
      spare.child.kill('SIGTERM');
    };
    // An idle spare holds a process and a connection: it goes after a while without waiters.
    const idle = setTimeout(drop, SPARE_IDLE_MS);
    idle.unref();
    spare.child.unref();
    spare.onExit = drop;
    spare.onError = drop;
    // A spare says nothing until it is given a run: anything it says now (lost, error) ends it.
    spare.onMessage = drop;
    spare.retire = () => {
      clearTimeout(idle);
      spare.child.ref();
    };
  }

  private startKeeper(): KeeperHandle {
    const { backend } = this.opts;
    const child = spawn(process.execPath, [this.opts.keeperPath, this.name, backend.station], {
      // Its own session: a Ctrl-C or a signal to the agent's group must not end the slot of a running fetcher.
      detached: true,
      stdio: ['pipe', 'pipe', 'ignore', 'pipe'],
      // No environment: a fetcher can read any /proc/PID/environ of this account; the URL (a secret)
      // goes as the first line of the keeper's stdin (agent/slots/pgSlotKeeper.ts).
      env: {},
    });
    const lifeline = child.stdio[3] as net.Socket;
    lifeline.pause();
    child.stdin?.on('error', () => {});
    child.stdin?.write(`${JSON.stringify({ url: backend.url })}\n`);
    const handle: KeeperHandle = { child, lifeline, onMessage: () => {}, onExit: () => {}, onError: () => {}, retire: () => {} };
    child.on('error', (err) => handle.onError(err));
    child.on('exit', () => handle.onExit());
    readline.createInterface({ input: child.stdout! }).on('line', (line) => {
      try {
        handle.onMessage(JSON.parse(line) as KeeperMessage);
      } catch {
        /* not a message of ours */
      }
    });
    return handle;
  }

  private served(waiter: Waiter, keeper: ChildProcess, lifeline: net.Socket, index: number, settle: () => void): void {
    settle();
    if (waiter.keeper !== keeper || !this.waiters.includes(waiter)) {
      // Aborted meanwhile: ending the lifeline ends the keeper and frees the lock.
      lifeline.destroy();
      return;
    }
    const at = this.waiters.indexOf(waiter);
    this.waiters.splice(at, 1);
    waiter.cleanup();
    waiter.keeper = null;
    this.dropTicket(waiter);
    // The keeper lives on by itself, also after this agent ends; when it ends, so do our pipes to it
    // (and a lifeline not yet handed to a fetcher: its fd getter then says the session is gone).
    keeper.once('exit', () => {
      keeper.stdin?.destroy();
      keeper.stdout?.destroy();
      lifeline.destroy();
    });
    keeper.unref();
    (keeper.stdout as net.Socket | null)?.unref();
    (keeper.stdin as net.Socket | null)?.on('error', () => {});
    lifeline.unref();
    const fd = (lifeline as unknown as { _handle?: { fd?: number } })._handle?.fd;
    if (typeof fd !== 'number' || fd < 0) {
      lifeline.destroy();
      waiter.reject(new RunRefusedError('slot-error', "the slot keeper's lifeline has no descriptor"));
      return;
    }
    let closed = false;
    let keptRun: string | null = null;
    keeper.once('exit', () => {
      if (keptRun !== null) this.kept.delete(keptRun);
    });
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
          if (record.runId && keeper.exitCode === null && keeper.signalCode === null) {
            keptRun = record.runId;
            this.kept.add(record.runId);
          }
          keeper.stdin?.write(
            `${JSON.stringify({ record: { pid: group, fetcher: record.fetcher, runId: record.runId, since: record.since } })}\n`,
          );
        },
        closeOwnCopy: () => {
          if (closed) return;
          closed = true;
          lifeline.destroy();
          (keeper.stdin as net.Socket | null)?.unref();
        },
      },
    });
  }
}
