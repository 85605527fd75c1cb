import * as fs from 'node:fs';
import { openExclusiveFlock } from './openExclusiveFlock';
import { formatOwnerRecord, type OwnerRecord } from './ownerRecord';

/**
 * A slot taken with a non-blocking exclusive flock(2) on its lock file. The descriptor is meant to
 * be handed to the fetcher process (as fd 3), after which the agent closes its own copy with
 * `closeOwnCopy()`: the lock then lives exactly as long as the run's processes keep the descriptor.
 */
export class SlotLock {
  private closed = false;

  constructor(readonly lockPath: string, readonly fd: number) {}

  /** Replaces the file's content with the owner record, while the lock is held. */
  writeRecord(record: OwnerRecord): void {
    const text = Buffer.from(formatOwnerRecord(record));
    fs.ftruncateSync(this.fd, 0);
    fs.writeSync(this.fd, text, 0, text.length, 0);
  }

  /** Closes the agent's descriptor. If a child inherited it, the lock stays with the child. */
  closeOwnCopy(): void {
    if (this.closed) return;
    this.closed = true;
    fs.closeSync(this.fd);
  }
}

/**
 * Tries to take the slot at `lockPath` without blocking; null when someone holds it. The path is
 * checked again after locking: if the file was removed or replaced meanwhile (the runbook's
 * `rm -f slot_N.lock`), the lock we got is on an orphaned inode that nobody else will ever see, so
 * it is dropped and the try repeated on the current file.
 */
export function tryLockSlot(lockPath: string): SlotLock | null {
  for (let attempt = 0; attempt < 5; attempt++) {
    // O_RDWR (not append) so the record can be rewritten in place.
    const fd = openExclusiveFlock(lockPath, fs.constants.O_RDWR | fs.constants.O_CREAT);
    if (fd === null) return null;
    let same = false;
    try {
      const held = fs.fstatSync(fd);
      const current = fs.statSync(lockPath);
      same = held.ino === current.ino && held.dev === current.dev;
    } catch {
      same = false;
    }
    if (same) return new SlotLock(lockPath, fd);
    fs.closeSync(fd);
  }
  return null;
}
