import * as fs from 'node:fs';
import type Database from 'better-sqlite3';

/**
 * Makes the spool's commits durable with an fsync of its WAL file run off the agent's main thread.
 *
 * Why: with `synchronous = FULL` SQLite fsyncs the WAL inside COMMIT, on the thread that commits; in
 * a CPU profile of 1,000 runs those fsyncs blocked the agent's main thread for about a tenth of its
 * time. So the connection commits with `synchronous = NORMAL` (SQLite then writes the frames and
 * syncs only at checkpoints) and this class fsyncs the WAL file itself: `sync()` on libuv's thread
 * pool for the group commit, whose callers still wait for it (nothing is acknowledged before it is on
 * disk), `syncNow()` on the spot for the synchronous writers (emit, close). An fsync covers every frame
 * written to the file before it, whichever connection wrote it.
 *
 * If the WAL cannot be opened the connection stays on `synchronous = FULL` (`open` returns null).
 */
export class WalSync {
  private fd: number | null;
  private chain: Promise<void> = Promise.resolve();

  private constructor(
    fd: number,
    private readonly onError: (err: Error) => void,
  ) {
    this.fd = fd;
  }

  static open(db: Database.Database, file: string, onError: (err: Error) => void): WalSync | null {
    let fd: number;
    try {
      // O_NOFOLLOW: the WAL is a file beside ours; a link planted there is not followed.
      fd = fs.openSync(`${file}-wal`, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
    } catch {
      return null;
    }
    const st = fs.fstatSync(fd);
    if (!st.isFile() || st.uid !== process.getuid?.()) {
      fs.closeSync(fd);
      return null;
    }
    db.pragma('synchronous = NORMAL');
    return new WalSync(fd, onError);
  }

  /** Resolves once everything written to the WAL before the call is on disk; in call order. */
  sync(): Promise<void> {
    const fd = this.fd;
    if (fd === null) return this.chain;
    const synced = new Promise<void>((resolve) => {
      fs.fsync(fd, (err) => {
        // An fd closed meanwhile was synced on the spot by close (syncNow): nothing was lost.
        if (err && this.fd === fd) this.onError(err);
        resolve();
      });
    });
    this.chain = Promise.all([this.chain, synced]).then(() => undefined);
    return this.chain;
  }

  /** Blocks the thread: for the synchronous writers only. */
  syncNow(): void {
    if (this.fd === null) return;
    try {
      fs.fsyncSync(this.fd);
    } catch (err) {
      this.onError(err as Error);
    }
  }

  close(): void {
    const fd = this.fd;
    if (fd === null) return;
    this.syncNow();
    this.fd = null;
    fs.closeSync(fd);
  }
}
