import * as fs from 'node:fs';
import type { Logger } from '../log/logger';
import type { VerifiedDir } from '../station/openInVerifiedDir';
import type { OwnerRecord } from './ownerRecord';
import { readProcInfo } from '../../shared/node/procInfo';
import { tryLockIn, writeRecordTo } from './slotLock';

/** A slot this process handed to one of its runs. */
export interface HeldSlot {
  index: number;
  name: string;
  record: OwnerRecord;
  /** The file the run's processes hold now, or the agent's re-lock of its replacement. */
  dev: number;
  ino: number;
  /** The agent's own lock on a re-created file, kept until the run ends. */
  relockFd: number | null;
  /**
   * Whether the record's process has ended, where the agent is told (a process it spawned): false
   * until then, true after. null: nothing tells it (a run of an earlier agent, the agent itself), so
   * only the process's /proc entry says.
   */
  holderEnded: boolean | null;
}

/**
 * The slots this process's runs hold, and the guard that keeps them taken when a tmp cleaner deletes
 * the lock files (or the whole folder) under them. The runs keep their flock on the removed inode,
 * which nobody else can see: a new file at the same name would be free, and the pool over-booked.
 * So when the file at a held slot's name is missing or another inode, the agent creates it again,
 * takes its flock itself and keeps that descriptor until the run ends: an agent, a CLI or a legacy
 * `flock` then finds the slot taken again.
 */
export class HeldSlots {
  private readonly held = new Map<number, HeldSlot>();

  constructor(
    private readonly pool: string,
    private readonly logger: Logger,
  ) {}

  /** `holderEnded` resolves true once the record's process has ended and been reaped (see HeldSlot.holderEnded). */
  track(index: number, name: string, record: OwnerRecord, dev: number, ino: number, holderEnded?: Promise<boolean>): void {
    this.drop(index);
    const slot: HeldSlot = { index, name, record, dev, ino, relockFd: null, holderEnded: holderEnded ? false : null };
    this.held.set(index, slot);
    // false (the end could not be learned) or a failure tells nothing: the holder is then looked up in /proc.
    holderEnded?.then(
      (ended) => (slot.holderEnded = ended ? true : null),
      () => (slot.holderEnded = null),
    );
  }

  has(index: number): boolean {
    return this.held.has(index);
  }

  get(index: number): HeldSlot | undefined {
    return this.held.get(index);
  }

  get size(): number {
    return this.held.size;
  }

  /** Forgets one slot whose holder (the agent itself, for in-agent work) has let it go. */
  forget(index: number): void {
    this.drop(index);
  }

  /**
   * Forgets the slots whose run has ended (its wrapper is gone), releasing any re-lock; returns them.
   * `told`: a slot whose holder the agent is told about is decided by that alone, without reading
   * /proc: a pool's every grant prunes, and reading each holder's /proc entry there was a few system
   * calls per held slot per run. Without it (the guard's round, once a second) every holder is looked
   * up, so a holder whose end was never told is still found.
   */
  prune(told = false): HeldSlot[] {
    const ended: HeldSlot[] = [];
    for (const slot of this.held.values()) {
      if (told && slot.holderEnded === false) continue;
      const info = told && slot.holderEnded === true ? null : readProcInfo(slot.record.pid);
      if (!info || info.state === 'Z' || info.startTime !== slot.record.startTime) {
        ended.push(slot);
        this.drop(slot.index);
      }
    }
    return ended;
  }

  /** True when some held slot's file is missing or replaced. */
  needsHeal(dir: VerifiedDir | null): boolean {
    for (const slot of this.held.values()) {
      const current = dir?.lstat(slot.name) ?? null;
      if (!current || current.ino !== slot.ino || current.dev !== slot.dev) return true;
    }
    return false;
  }

  /** Re-creates and re-locks every held slot whose file is missing or replaced. */
  heal(dir: VerifiedDir): void {
    for (const slot of this.held.values()) {
      const current = dir.lstat(slot.name);
      if (current && current.ino === slot.ino && current.dev === slot.dev) continue;
      const lock = tryLockIn(dir, slot.name);
      if (!lock) {
        this.logger.error(
          { pool: this.pool, index: slot.index, runId: slot.record.runId },
          'a slot lock file was removed under a running fetcher and another process took the new one: the pool is over-booked until one ends',
        );
        continue;
      }
      writeRecordTo(lock.fd, slot.record);
      if (slot.relockFd !== null) fs.closeSync(slot.relockFd);
      Object.assign(slot, { relockFd: lock.fd, dev: lock.dev, ino: lock.ino });
      this.logger.warn(
        { pool: this.pool, index: slot.index, runId: slot.record.runId, lockPath: lock.lockPath },
        'slot lock file was removed under a running fetcher (tmp cleaner?): re-created and re-locked by the agent until the run ends',
      );
    }
  }

  close(): void {
    for (const index of [...this.held.keys()]) this.drop(index);
  }

  private drop(index: number): void {
    const slot = this.held.get(index);
    if (!slot) return;
    if (slot.relockFd !== null) fs.closeSync(slot.relockFd);
    this.held.delete(index);
  }
}
