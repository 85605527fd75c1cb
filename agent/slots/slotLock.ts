import * as fs from 'node:fs';
import { flockSync } from 'fs-ext';
import { VerifiedDir } from '../station/openInVerifiedDir';
import { formatOwnerRecord, type OwnerRecord } from './ownerRecord';

/**
 * A slot taken with a non-blocking exclusive flock(2) on its lock file. The descriptor is meant to
 * be handed to the fetcher process (as fd 3), after which the agent closes its own copy with
 * `closeOwnCopy()`: the lock then lives exactly as long as the run's processes keep the descriptor.
 */
export class SlotLock {
  private closed = false;

  constructor(
    readonly lockPath: string,
    readonly fd: number,
    readonly dev: number,
    readonly ino: number,
    private readonly onRecord: (record: OwnerRecord, lock: SlotLock, holderEnded?: Promise<boolean>) => void = () => {},
  ) {}

  /**
   * Replaces the file's content with the owner record, while the lock is held. `holderEnded`, where
   * this agent watches the record's process (its spawn): resolves true once it has ended and been
   * reaped, false if that cannot be learned.
   */
  writeRecord(record: OwnerRecord, holderEnded?: Promise<boolean>): void {
    writeRecordTo(this.fd, record);
    this.onRecord(record, this, holderEnded);
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Closes the agent's descriptor. If a child inherited it, the lock stays with the child. */
  closeOwnCopy(): void {
    if (this.closed) return;
    this.closed = true;
    fs.closeSync(this.fd);
  }
}

/**
 * Rewrites the record in place. A shorter record than the file's is padded with spaces (readers trim)
 * rather than truncated: ftruncate(2) on ext4 waits on the journal, and under load it was the
 * costliest call of a run's start on the agent's main thread (a CPU profile of 1,000 runs).
 */
export function writeRecordTo(fd: number, record: OwnerRecord): void {
  const json = formatOwnerRecord(record).trimEnd();
  const size = fs.fstatSync(fd).size;
  const text = Buffer.from(`${json.padEnd(size - 1, ' ')}\n`);
  fs.writeSync(fd, text, 0, text.length, 0);
}

/**
 * Tries to take the slot file `name` of a verified folder without blocking; null when someone holds
 * it. The name is checked again after locking: if the file was removed or replaced meanwhile (the
 * runbook's `rm -f slot_N.lock`), the lock we got is on an orphaned inode that nobody else will ever
 * see, so it is dropped and the try repeated on the current file. An unsafe file throws.
 */
export function tryLockIn(
  dir: VerifiedDir,
  name: string,
  onRecord?: (record: OwnerRecord, lock: SlotLock, holderEnded?: Promise<boolean>) => void,
): SlotLock | null {
  for (let attempt = 0; attempt < 5; attempt++) {
    // O_RDWR (not append) so the record can be rewritten in place.
    const opened = dir.openFile(name, { create: true, write: true });
    if (!opened) return null;
    const { fd, st } = opened;
    if (!flockExclusiveNb(fd)) return null;
    const current = dir.lstat(name);
    if (current && current.ino === st.ino && current.dev === st.dev) return new SlotLock(dir.pathOf(name), fd, st.dev, st.ino, onRecord);
    fs.closeSync(fd);
  }
  return null;
}

/** flock(LOCK_EX | LOCK_NB): true when taken; false (descriptor closed) when another holds it. */
export function flockExclusiveNb(fd: number): boolean {
  try {
    flockSync(fd, 'exnb');
    return true;
  } catch (err) {
    fs.closeSync(fd);
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EAGAIN' || code === 'EWOULDBLOCK') return false;
    throw err;
  }
}
