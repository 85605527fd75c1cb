import * as fs from 'node:fs';
import { stillCheckedFolder } from '../station/verifiedDir';
import { openLogDir } from './runLogFile';

interface Held {
  logDir: string;
  fd: number;
  /** The folder as checked (its fstat at the open). */
  stat: fs.Stats;
  /** Spawns the descriptor was handed to and that have not taken their copy yet. */
  users: number;
  /** No longer the folder in use: closed once its last user is done. */
  retired: boolean;
}

/** The log folder's descriptor lent to one spawn; `release` once the spawner has its own copy. */
export interface LogDirLease {
  fd: number;
  release(): void;
}

/**
 * The log folder's checked descriptor, kept open between runs: a spawner that makes each run's log in
 * the run's own process is handed the folder at every spawn, and opening, checking and closing it
 * there was a few percent of a burst's main thread. Each spawn costs one lstat instead: the
 * descriptor is lent again while the path still names that very folder with the owner and mode it
 * was checked with (stillCheckedFolder); otherwise the path is opened and checked again (openLogDir,
 * which makes the folder again if a tmp cleaner removed it). A descriptor is closed only once no
 * spawn it was lent to still needs it: the spawner takes its copy by number (pidfd_getfd) after the
 * request is sent, and a number closed before that could name another file by then.
 */
export class HeldLogDir {
  private held: Held | null = null;

  lend(logDir: string, setting: string): LogDirLease {
    let held = this.held;
    if (held === null || held.logDir !== logDir || stillCheckedFolder(logDir, held.stat) === null) {
      this.retire();
      const fd = openLogDir(logDir, setting);
      held = { logDir, fd, stat: fs.fstatSync(fd), users: 0, retired: false };
      this.held = held;
    }
    const lent = held;
    lent.users += 1;
    let released = false;
    return {
      fd: lent.fd,
      release: () => {
        if (released) return;
        released = true;
        lent.users -= 1;
        if (lent.retired && lent.users === 0) fs.closeSync(lent.fd);
      },
    };
  }

  /** Closes the descriptor held (once its lent spawns are done). */
  close(): void {
    this.retire();
  }

  private retire(): void {
    const held = this.held;
    if (held === null) return;
    this.held = null;
    held.retired = true;
    if (held.users === 0) fs.closeSync(held.fd);
  }
}
