import * as fs from 'node:fs';
import * as path from 'node:path';
import type { SlotHolder, SlotState } from '../../shared/protocol';
import type { Logger } from '../log/logger';
import { RunRefusedError } from '../errors';
import { readCapped, tightenedMessage, VerifiedDir } from '../station/openInVerifiedDir';
import type { StationPolicy } from '../station/stationPolicy';
import { UnsafeStationError } from '../station/unsafeStationError';
import { ensureVerifiedDir } from '../station/verifiedDir';
import { HeldVerifiedDir } from '../station/heldVerifiedDir';
import { HeldSlots } from './heldSlots';
import { parseOwnerRecord, type OwnerRecord } from './ownerRecord';
import { readProcInfo } from '../../shared/node/procInfo';
import { kernelLockOf, lazyKernelFlocks, readKernelFlocks, type KernelLocks } from '../flock/procLocks';
import { whyNotOurRun, type RecordedRun } from './provenHolder';
import { reclaimIfStopped, type ReclaimEvent } from './reclaimIfStopped';
import { tryLockIn, type SlotLock } from './slotLock';
import { DirNames } from './dirNames';

/** How often waiting runs retry a pool: a slot held by another process (a legacy flock script, a CLI
 * run) is freed without telling us, so the wait polls for it, besides every local release. */
const SLOT_POLL_MS = 50;
/** How often, at most, the waiters behind grants are told their new places (a departure tells them at once). */
const POSITION_REPORT_MS = 50;
/** How long a publication pictures a slot seen free as free, without the kernel's lock table. */
const SEEN_FREE_GRACE_MS = 250;
/** How often the lock files of running fetchers are checked against removal (a tmp cleaner, `rm`). */
const LOCK_FILE_GUARD_MS = 1000;

export type { ReclaimEvent } from './reclaimIfStopped';

export interface SlotGrant {
  lock: SlotLock;
  index: number;
}

/** The largest pool CRON_POOL_*_SLOTS allows: slot files numbered beyond it are never looked at. */
export const MAX_POOL_SLOTS = 256;

export interface SlotPoolOptions {
  name: string;
  dir: string;
  size: number;
  waitTimeoutSeconds: number;
  /** Who may share the folder (this account, or a lock group). */
  policy: StationPolicy;
  /** Whether a pid and start time are a run of this station's run store: only those are ever signalled. */
  isRecordedRun: RecordedRun;
  /** File name of slot N; the serial mode uses the one legacy lock file. */
  fileName?: (index: number) => string;
  /** How often waiters retry while the holders are other processes (their release sends no signal). */
  pollMs?: number;
  /** How often the held slots' files are checked for a tmp cleaner's removal. */
  guardMs?: number;
  /** How long a publication takes a slot seen free as still free (SEEN_FREE_GRACE_MS). */
  seenFreeGraceMs?: number;
  logger: Logger;
  onReclaim(event: ReclaimEvent): void;
  /** The pool's picture may have changed with no run moving: a publication took a slot seen free moments ago as still free. */
  onUnsure?(): void;
}

interface Waiter {
  id: string;
  resolve(grant: SlotGrant): void;
  reject(err: Error): void;
  onPosition(position: number): void;
  cleanup(): void;
}

const SLOT_FILE = /^slot_(0|[1-9]\d{0,2})\.lock$/;

/**
 * One pool of slots. Waiters are served first come, first served; a slot is a flock on
 * `<dir>/slot_<N>.lock`, so agents, CLI runs and shell scripts on the same files share the pool.
 */
export class SlotPool {
  readonly name: string;
  readonly size: number;
  readonly waitTimeoutSeconds: number;
  private readonly waiters: Waiter[] = [];
  private pollTimer: NodeJS.Timeout | null = null;
  private guardTimer: NodeJS.Timeout | null = null;
  private readonly fileName: (index: number) => string;
  private readonly held: HeldSlots;
  /** Slots handed to a waiting run whose owner record is not written yet (its fetcher is starting). */
  private readonly granted = new Map<number, SlotLock>();
  /** Slots seen free (the kernel's table had no lock on the file, or our run's processes ended) and not tried since. */
  private readonly seenFree = new Map<number, { dev: number; ino: number; at: number }>();
  private recheckTimer: NodeJS.Timeout | null = null;
  /** The coming report of the waiters' places after grants (reportPositions). */
  private reportTimer: NodeJS.Timeout | null = null;
  /** Whether the slots held by runs of an earlier agent were looked for (once, at first use). */
  private adopted = false;
  /** Refusals already logged, so a waiting run does not log the same one every poll. */
  private readonly refusalsLogged = new Set<string>();

  constructor(private readonly opts: SlotPoolOptions) {
    this.name = opts.name;
    this.size = opts.size;
    this.waitTimeoutSeconds = opts.waitTimeoutSeconds;
    this.fileName = opts.fileName ?? ((i) => `slot_${i}.lock`);
    this.held = new HeldSlots(opts.name, opts.logger);
    ensureVerifiedDir(opts.dir, opts.policy, 'QUANTILICA_LOCK_DIR');
  }

  lockPath(index: number): string {
    return path.join(this.opts.dir, this.fileName(index));
  }

  /**
   * Resolves with a held slot, in arrival order. Rejects with RunRefusedError('wait-timeout') after
   * the pool's wait timeout, or with the signal's reason when it aborts; either way the place is freed.
   * An error while taking a slot (an unsafe lock file, EMFILE…) rejects the waiter it was taken for.
   */
  acquire(id: string, signal: AbortSignal, onPosition: (position: number) => void = () => {}): Promise<SlotGrant> {
    return new Promise<SlotGrant>((resolve, reject) => {
      if (signal.aborted) {
        reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
        return;
      }
      const timer = setTimeout(() => {
        this.remove(waiter);
        reject(new RunRefusedError('wait-timeout', `no ${this.name} slot became free within ${this.waitTimeoutSeconds} s`));
      }, this.waitTimeoutSeconds * 1000);
      timer.unref();
      const onAbort = () => {
        this.remove(waiter);
        reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
      };
      signal.addEventListener('abort', onAbort, { once: true });
      const waiter: Waiter = {
        id,
        resolve,
        reject,
        onPosition,
        cleanup: () => {
          clearTimeout(timer);
          signal.removeEventListener('abort', onAbort);
        },
      };
      // With runs queued ahead, the last pump found the pool full and the next release or poll pumps
      // again; a try now could only find the same (first come, first served), at a folder's reading per run.
      const queuedBehind = this.waiters.length > 0;
      this.waiters.push(waiter);
      if (!queuedBehind) this.pump();
      // Only a run that is still queued after the pump has a position to report; behind others it is
      // the last one (nothing ran since the push).
      const position = queuedBehind ? this.waiters.length - 1 : this.waiters.indexOf(waiter);
      if (position >= 0) onPosition(position + 1);
    });
  }

  /**
   * A run of this process released its slot: serve the next waiter now rather than at the next poll.
   * `index`: a slot the agent itself held (in-agent work such as the GitHub sync), whose holder pid
   * lives on after the release, so its guard must be dropped by name.
   */
  released(index?: number): void {
    if (index !== undefined) this.held.forget(index);
    this.pump();
  }

  close(): void {
    if (this.pollTimer) clearTimeout(this.pollTimer);
    if (this.guardTimer) clearInterval(this.guardTimer);
    if (this.recheckTimer) clearTimeout(this.recheckTimer);
    this.recheckTimer = null;
    if (this.reportTimer) clearTimeout(this.reportTimer);
    this.reportTimer = null;
    this.pollTimer = null;
    this.guardTimer = null;
    this.held.close();
    this.folder.close();
    this.granted.clear();
    this.seenFree.clear();
  }

  private remove(waiter: Waiter): void {
    const at = this.waiters.indexOf(waiter);
    if (at >= 0) this.waiters.splice(at, 1);
    waiter.cleanup();
    // A departure (a cancel, a timeout) is rare: the runs behind it are told at once.
    this.tellPositions(at);
  }

  private pump(): void {
    let served = 0;
    // Once per pump, not per try: a grant only adds to `granted`, so the tries after it would read the
    // same holders' /proc entries again.
    this.pruneHeld(true);
    while (this.waiters.length > 0) {
      let grant: SlotGrant | null;
      try {
        grant = this.tryTakeAny();
      } catch (err) {
        // The waiter leaves the queue with the error: never served later with a slot nobody uses.
        const waiter = this.waiters.shift()!;
        waiter.cleanup();
        waiter.reject(refusal(this.name, err));
        served += 1;
        break;
      }
      if (!grant) break;
      const waiter = this.waiters.shift()!;
      waiter.cleanup();
      this.granted.set(grant.index, grant.lock);
      waiter.resolve(grant);
      served += 1;
    }
    if (served > 0) this.reportPositions();
    if (this.waiters.length > 0 && !this.pollTimer) {
      this.pollTimer = setTimeout(() => {
        this.pollTimer = null;
        this.pump();
      }, this.opts.pollMs ?? SLOT_POLL_MS);
      this.pollTimer.unref();
    }
  }

  /**
   * After grants: tells the waiters their new places at most once per POSITION_REPORT_MS. Every grant
   * moves the whole queue, and telling each waiter at each grant made a run's start cost grow with
   * the queue's length (1,000 queued runs: a third of a million calls over the burst).
   */
  private reportPositions(): void {
    if (this.reportTimer) return;
    this.reportTimer = setTimeout(() => {
      this.reportTimer = null;
      this.tellPositions(0);
    }, POSITION_REPORT_MS);
    this.reportTimer.unref();
  }

  private tellPositions(from: number): void {
    for (let i = Math.max(0, from); i < this.waiters.length; i++) this.waiters[i].onPosition(i + 1);
  }

  /** The pool's folder, checked on its descriptor and kept open while the path names it unchanged. */
  private readonly folder = new HeldVerifiedDir(() => this.openDir());

  /** The pool's folder, checked on its descriptor; made again (and checked) if a tmp cleaner removed it. */
  private openDir(): VerifiedDir {
    const dir = VerifiedDir.open(this.opts.dir, this.opts.policy, this.onTightened);
    if (dir) return dir;
    ensureVerifiedDir(this.opts.dir, this.opts.policy, 'QUANTILICA_LOCK_DIR');
    const made = VerifiedDir.open(this.opts.dir, this.opts.policy, this.onTightened);
    if (!made) throw new UnsafeStationError('lock-dir-unsafe', `${this.opts.dir} vanished again right after it was made`);
    return made;
  }

  private readonly onTightened = (file: string, mode: number): void => {
    this.opts.logger.warn({ pool: this.name, file, mode: mode.toString(8) }, tightenedMessage(file, mode));
  };

  private lastReclaimAt = 0;
  private readonly dirNames = new DirNames();

  /** Whether the stopped-holder check of busy slots is due (see tryTakeAny). */
  private reclaimDue(): boolean {
    return Date.now() - this.lastReclaimAt >= (this.opts.pollMs ?? SLOT_POLL_MS);
  }

  /** Every slot within the size is held by a run of this agent or handed to one that is starting. */
  private allOwn(): boolean {
    for (let index = 0; index < this.size; index++) if (!this.held.has(index) && !this.grantedOpen(index)) return false;
    return true;
  }

  /** The caller (pump) has pruned the held slots. */
  private tryTakeAny(): SlotGrant | null {
    // Under a burst every grant is followed by a try that finds the pool full of this agent's own
    // runs: nothing in the folder can change that answer, so it is not looked at. A removed file of a
    // held slot is still healed by the guard within a second, as between pumps.
    if (this.adopted && this.allOwn() && !this.reclaimDue()) return null;
    const dir = this.folder.get();
    this.adoptProvenHolders(dir);
    if (this.held.needsHeal(dir)) this.held.heal(dir);
    // A pool shrunk while higher-numbered slots are held: those holders still count against it.
    const beyond = this.heldBeyondSize(dir);
    if (beyond >= this.size) return null;
    const busy: number[] = [];
    for (let index = 0; index < this.size; index++) {
      // A slot of our own run stays ours even while its file is gone; one granted to a starting run
      // is locked by our own descriptor, so a try could only fail.
      if (this.held.has(index) || this.grantedOpen(index)) {
        busy.push(index);
        continue;
      }
      const name = this.fileName(index);
      this.seenFree.delete(index);
      const lock = tryLockIn(dir, name, (record, l, holderEnded) => this.onHeld(index, name, record, l, holderEnded));
      if (!lock) {
        busy.push(index);
        continue;
      }
      try {
        if (beyond > 0 && this.heldWithin(dir, index) + beyond >= this.size) {
          lock.closeOwnCopy();
          return null;
        }
      } catch (err) {
        lock.closeOwnCopy();
        throw err;
      }
      return { lock, index };
    }
    // The stopped-holder check reads each busy slot's record and its holder's /proc entries: under a
    // burst, every grant is followed by a try that finds the pool full, so it runs at most once per
    // poll period (a holder stopped for good is still found within it), not once per try.
    if (this.reclaimDue()) {
      this.lastReclaimAt = Date.now();
      for (const index of busy) this.reclaim(dir, index);
    }
    return null;
  }

  /**
   * Runs adopted from an earlier agent hold slots this process did not hand out: the ones whose holder
   * is proven to be a run of our store are guarded like our own (re-locked if a tmp cleaner strikes).
   */
  private adoptProvenHolders(dir: VerifiedDir): void {
    if (this.adopted) return;
    this.adopted = true;
    const locks = readKernelFlocks();
    for (let index = 0; index < this.size; index++) {
      const name = this.fileName(index);
      const st = regular(dir.lstat(name));
      if (this.held.has(index) || !kernelLockOf(locks, st)) continue;
      const record = readRecordIn(dir, name);
      if (record && st && whyNotOurRun(record, st, this.opts.isRecordedRun) === null) this.onHeld(index, name, record, st);
    }
  }

  private onHeld(
    index: number,
    name: string,
    record: OwnerRecord,
    file: { dev: number; ino: number },
    holderEnded?: Promise<boolean>,
  ): void {
    this.granted.delete(index);
    this.held.track(index, name, record, file.dev, file.ino, holderEnded);
    if (this.guardTimer) return;
    this.guardTimer = setInterval(() => this.guard(), this.opts.guardMs ?? LOCK_FILE_GUARD_MS);
    this.guardTimer.unref();
  }

  /** Between acquisitions: notice a removed lock file within a second, not at the next run. */
  private guard(): void {
    this.pruneHeld();
    if (this.held.size === 0) {
      if (this.guardTimer) clearInterval(this.guardTimer);
      this.guardTimer = null;
      return;
    }
    try {
      const dir = this.folder.get();
      if (this.held.needsHeal(dir)) this.held.heal(dir);
    } catch (err) {
      this.logOnce(`guard:${(err as Error).message}`, { err, pool: this.name }, 'cannot re-lock the slots of running fetchers');
    }
  }

  /** Held slots below the size, other than `except`. */
  private heldWithin(dir: VerifiedDir, except: number): number {
    const locks = readKernelFlocks();
    let held = 0;
    for (let i = 0; i < this.size; i++) {
      if (i !== except && (this.held.has(i) || kernelLockOf(locks, dir.lstat(this.fileName(i))))) held += 1;
    }
    return held;
  }

  /** Slot files numbered from the size up to the largest pool allowed; beyond that a name is ignored. */
  private indicesBeyondSize(dir: VerifiedDir): number[] {
    if (this.opts.fileName) return [];
    return this.dirNames
      .of(dir)
      .map((n) => Number(SLOT_FILE.exec(n)?.[1] ?? -1))
      .filter((i) => i >= this.size && i < MAX_POOL_SLOTS)
      .sort((a, b) => a - b);
  }

  private heldBeyondSize(dir: VerifiedDir): number {
    const beyond = this.indicesBeyondSize(dir);
    if (beyond.length === 0) return 0;
    const locks = readKernelFlocks();
    return beyond.filter((i) => kernelLockOf(locks, regular(dir.lstat(this.fileName(i)))) !== null).length;
  }

  private reclaim(dir: VerifiedDir, index: number): void {
    const outcome = reclaimIfStopped(dir, this.fileName(index), this.opts.isRecordedRun);
    if (outcome.kind === 'reclaimed') {
      this.opts.logger.warn(
        { pool: this.name, index, pid: outcome.record.pid, fetcher: outcome.record.fetcher, runId: outcome.record.runId },
        'reclaimed a slot from a stopped holder',
      );
      this.opts.onReclaim({
        pool: this.name,
        index,
        lockPath: this.lockPath(index),
        record: outcome.record,
        killedGroup: outcome.record.pid,
      });
    } else if (outcome.kind === 'refused') {
      const r = outcome.record;
      this.logOnce(
        `${index}:${r.pid}:${r.startTime}:${outcome.why}`,
        { pool: this.name, index, pid: r.pid, reason: outcome.why },
        'a stopped slot holder is not provably one of our runs: not signalled',
      );
    }
  }

  private logOnce(key: string, fields: Record<string, unknown>, message: string): void {
    if (this.refusalsLogged.has(key)) return;
    if (this.refusalsLogged.size > 1000) this.refusalsLogged.clear();
    this.refusalsLogged.add(key);
    this.opts.logger.warn(fields, message);
  }

  /**
   * What each slot's lock file says now, checked against the kernel's lock table (read once by the
   * caller for all pools, and only if a slot is not known to be this agent's) and /proc. Never throws
   * and never blocks: a status must always answer.
   */
  state(isOwnRun: (runId: string) => boolean, locks: KernelLocks = lazyKernelFlocks(), publishing = false): SlotState[] {
    let dir: VerifiedDir | null = null;
    try {
      dir = this.folder.get();
      this.adoptProvenHolders(dir);
      this.pruneHeld(true);
      if (this.held.needsHeal(dir)) this.held.heal(dir);
    } catch (err) {
      this.logOnce(`state:${(err as Error).message}`, { err, pool: this.name }, 'cannot read the pool folder');
    }
    const indices = [...Array.from({ length: this.size }, (_, i) => i), ...(dir ? this.indicesBeyondSize(dir) : [])];
    return indices.map((index) => ({
      pool: this.name,
      index,
      lockPath: this.lockPath(index),
      holder: this.holderOf(dir, index, locks, isOwnRun, publishing),
    }));
  }

  /** `told`: see HeldSlots.prune. The guard's round looks every holder up. */
  private pruneHeld(told = false): void {
    const at = performance.now();
    for (const slot of this.held.prune(told)) this.seenFree.set(slot.index, { dev: slot.dev, ino: slot.ino, at });
  }

  /**
   * A slot seen free moments ago, still on the same file. During a burst the pools' pictures find
   * free slots in nearly every reading (a run's end before the next grant, a pool that fills slower
   * than it drains), and each would read the kernel's table to learn that nobody else took one in
   * those milliseconds. A publication pictures such a slot as free for a short grace instead, and the
   * pool is pictured again when the grace is over (the table then says whether another process took
   * it). A snapshot (a status) always asks the table.
   */
  private seenFreeNow(index: number, file: { dev: number; ino: number } | null): boolean {
    const seen = this.seenFree.get(index);
    if (!seen || !file || seen.dev !== file.dev || seen.ino !== file.ino) return false;
    const left = seen.at + (this.opts.seenFreeGraceMs ?? SEEN_FREE_GRACE_MS) - performance.now();
    if (left <= 0) return false;
    if (!this.recheckTimer) {
      this.recheckTimer = setTimeout(
        () => {
          this.recheckTimer = null;
          this.opts.onUnsure?.();
        },
        Math.ceil(left) + 1,
      );
      this.recheckTimer.unref();
    }
    return true;
  }

  /** A slot handed to a starting run, still locked by the agent's descriptor on the file at its name. */
  private grantedAt(index: number, file: { dev: number; ino: number } | null): boolean {
    if (!this.grantedOpen(index)) return false;
    const lock = this.granted.get(index)!;
    return file !== null && file.dev === lock.dev && file.ino === lock.ino;
  }

  /** A slot handed to a starting run whose descriptor the agent still has (it holds the flock). */
  private grantedOpen(index: number): boolean {
    const lock = this.granted.get(index);
    if (lock === undefined) return false;
    if (!lock.isClosed) return true;
    this.granted.delete(index);
    return false;
  }

  private holderOf(
    dir: VerifiedDir | null,
    index: number,
    locks: KernelLocks,
    isOwnRun: (runId: string) => boolean,
    publishing: boolean,
  ): SlotHolder | null {
    const name = this.fileName(index);
    const file = dir ? regular(dir.lstat(name)) : null;
    const own = this.held.get(index);
    // This agent's runs hold their slots' files by descriptor: while the file at the name is that
    // inode, the kernel's table can only say what the agent already knows.
    if (own && file && file.dev === own.dev && file.ino === own.ino) {
      return { pid: own.record.pid, runId: own.record.runId, fetcher: own.record.fetcher, since: own.record.since, foreign: false };
    }
    // The agent's, for a run whose fetcher is starting: the run is named with its fetcher once the
    // owner record is written (a view leads a slot's row with the fetcher of the run it names).
    if (this.grantedAt(index, file)) return { pid: process.pid, runId: null, fetcher: null, since: null, foreign: false };
    if (publishing && this.seenFreeNow(index, file)) return null;
    const kernelLock = file ? kernelLockOf(locks(), file) : null;
    if (!kernelLock && !own && file) this.seenFree.set(index, { dev: file.dev, ino: file.ino, at: performance.now() });
    if (!kernelLock) {
      // Our run's lock is on a removed file the kernel still lists under its old inode: still held.
      return own
        ? { pid: own.record.pid, runId: own.record.runId, fetcher: own.record.fetcher, since: own.record.since, foreign: false }
        : null;
    }
    const record = dir ? readRecordIn(dir, name) : null;
    const info = record ? readProcInfo(record.pid) : null;
    // A slot this agent holds stays ours until released, also between its run's end and the release
    // (the run has left the active set by then; it is not another process's lock).
    if (own && kernelLock.dev === own.dev && kernelLock.ino === own.ino && record?.runId === own.record.runId) {
      return { pid: record.pid, runId: record.runId, fetcher: record.fetcher, since: record.since, foreign: false };
    }
    if (record && info && info.startTime === record.startTime) {
      return {
        pid: record.pid,
        runId: record.runId,
        fetcher: record.fetcher,
        since: record.since,
        foreign: !(record.runId && isOwnRun(record.runId)),
      };
    }
    return { pid: kernelLock.pid, runId: null, fetcher: null, since: null, foreign: true };
  }
}

/** The identity of a regular file only: a FIFO or link at a slot's name holds no slot. */
function regular(st: fs.Stats | null): fs.Stats | null {
  return st && st.isFile() ? st : null;
}

/** The owner record of a slot file, read from the checked descriptor with a size cap; null if none or unsafe. */
export function readRecordIn(dir: VerifiedDir, name: string): OwnerRecord | null {
  try {
    const opened = dir.openFile(name, { create: false, write: false });
    if (!opened) return null;
    try {
      return parseOwnerRecord(readCapped(opened.fd));
    } finally {
      fs.closeSync(opened.fd);
    }
  } catch {
    return null;
  }
}

function refusal(pool: string, err: unknown): RunRefusedError {
  if (err instanceof UnsafeStationError) return new RunRefusedError(err.reason, err.message);
  const code = (err as NodeJS.ErrnoException).code;
  return new RunRefusedError('slot-error', `cannot take a ${pool} slot: ${code ?? ''} ${(err as Error).message}`.replace(/\s+/g, ' '));
}
