import * as fs from 'node:fs';
import * as path from 'node:path';
import { openRunLog } from './runLogFile';

/**
 * Keeps a run log under its cap while the fetcher writes to it. The fetcher holds the file open with
 * O_APPEND (a pipe through the agent would kill it with SIGPIPE if the agent died), so the log is
 * capped by copy-truncate: keep the newest half of the cap behind a marker line. The agent does this
 * on a timer and once more when the run ends, always on the descriptor it made the log with (or
 * opened and checked once, for an adopted run): the name is never opened again, so a log swapped for
 * a link to another file cuts nothing but the log.
 */
export function capLogFile(fd: number, capBytes: number): boolean {
  const size = fs.fstatSync(fd).size;
  if (size <= capBytes) return false;
  const keep = Math.floor(capBytes / 2);
  const tail = Buffer.alloc(keep);
  const read = fs.readSync(fd, tail, 0, keep, size - keep);
  const marker = Buffer.from(`[quantilica: log over its cap of ${capBytes} bytes; ${size - read} earlier bytes dropped]\n`);
  fs.ftruncateSync(fd, 0);
  // One append (the descriptor is O_APPEND): the marker and the tail stay together. What the fetcher
  // appends between the truncate and this write lands before the marker: kept, though out of order.
  fs.writeSync(fd, Buffer.concat([marker, tail.subarray(0, read)]));
  return true;
}

interface Watched {
  fd: number;
  dir: string;
  name: string;
}

/** One inotify watch on a folder of logs, kept while the capper lives. */
interface WatchedDir {
  watcher: fs.FSWatcher | null;
  /** The logs being capped in this folder, by file name. */
  logs: Map<string, number>;
}

/**
 * Caps the logs of running fetchers as they grow. A timer alone let a fast writer put hundreds of MB
 * into a log between two checks; an inotify watch (fs.watch) on the logs' folder wakes the agent on
 * every write, and the check truncates at once. The overshoot is bounded by what the fetcher writes
 * between its write and the agent's next turn of the event loop (README, "Log cap"). The folder is
 * watched, not each log: removing an inotify watch waits for the kernel's grace period on the main
 * thread (a tenth of its time per run in a burst of no-op runs), and the folder's watch is made once.
 * The timer stays as a backstop for filesystems without inotify and for a log moved out of its folder.
 */
export class LogCapper {
  private readonly watched = new Map<string, Watched>();
  private readonly dirs = new Map<string, WatchedDir>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly capBytes: number,
    backstopMs = 1000,
  ) {
    this.timer = setInterval(() => {
      for (const w of this.watched.values()) capQuietly(w.fd, this.capBytes);
    }, backstopMs);
    this.timer.unref();
  }

  /** Caps the log open on `fd` (the capper owns the descriptor from here on and closes it in unwatch). */
  watch(logPath: string, fd: number): void {
    if (this.watched.has(logPath)) {
      fs.closeSync(fd);
      return;
    }
    const dir = path.dirname(logPath);
    const name = path.basename(logPath);
    this.watched.set(logPath, { fd, dir, name });
    this.dirOf(dir).logs.set(name, fd);
    capQuietly(fd, this.capBytes);
  }

  /** The descriptor of a watched log (to read a running run's log without its name), or null. */
  fdOf(logPath: string): number | null {
    return this.watched.get(logPath)?.fd ?? null;
  }

  /** How many folders have a live inotify watch (one per folder, however many of its logs run). */
  get folderWatches(): number {
    let n = 0;
    for (const d of this.dirs.values()) if (d.watcher !== null) n++;
    return n;
  }

  /** Stops capping, caps once more (the last writes of the run) and closes the descriptor. */
  unwatch(logPath: string): void {
    const w = this.watched.get(logPath);
    if (!w) return;
    this.watched.delete(logPath);
    this.dirs.get(w.dir)?.logs.delete(w.name);
    capQuietly(w.fd, this.capBytes);
    fs.closeSync(w.fd);
  }

  close(): void {
    clearInterval(this.timer);
    for (const d of this.dirs.values()) d.watcher?.close();
    this.dirs.clear();
    for (const w of this.watched.values()) fs.closeSync(w.fd);
    this.watched.clear();
  }

  private dirOf(dir: string): WatchedDir {
    let entry = this.dirs.get(dir);
    if (!entry) {
      entry = { watcher: null, logs: new Map() };
      this.dirs.set(dir, entry);
    }
    if (entry.watcher === null) entry.watcher = this.watchDir(dir, entry);
    return entry;
  }

  private watchDir(dir: string, entry: WatchedDir): fs.FSWatcher | null {
    try {
      // A wake-up only: the event names a file, and the cap works on the descriptor made for it.
      const ino = fs.statSync(dir).ino;
      const selfName = path.basename(dir);
      // The folder went away: its watch is dead; the backstop timer caps its logs, and the next run
      // in a folder of that path watches it again.
      const drop = (): void => {
        watcher.close();
        if (entry.watcher === watcher) entry.watcher = null;
      };
      const watcher = fs.watch(dir, { persistent: false }, (_event, name) => {
        const fd = name === null ? undefined : entry.logs.get(name);
        if (fd !== undefined) {
          capQuietly(fd, this.capBytes);
          return;
        }
        // A name that is not a running log (a log renamed within the folder, a new file): every
        // running log of the folder is checked, a few fstats.
        for (const other of entry.logs.values()) capQuietly(other, this.capBytes);
        // inotify names the folder itself when it is removed or moved.
        if (name === selfName && !sameInode(dir, ino)) drop();
      });
      watcher.on('error', drop);
      return watcher;
    } catch {
      return null; // no inotify here: the backstop timer caps
    }
  }
}

function sameInode(dir: string, ino: number): boolean {
  try {
    return fs.statSync(dir).ino === ino;
  } catch {
    return false;
  }
}

function capQuietly(fd: number, capBytes: number): void {
  try {
    capLogFile(fd, capBytes);
  } catch {
    // An I/O error now (a full disk) is tried again on the next event.
  }
}

/** Reads at most the last `maxBytes` of a log open on `fd`. */
export function tailFd(fd: number, maxBytes: number): { text: string; truncated: boolean } {
  const size = fs.fstatSync(fd).size;
  const length = Math.min(size, maxBytes);
  const buf = Buffer.alloc(length);
  const got = fs.readSync(fd, buf, 0, length, size - length);
  return { text: buf.subarray(0, got).toString('utf8'), truncated: size > length };
}

/** Reads at most the last `maxBytes` of an ended run's log: never through a link, only a file of ours. */
export function tailFile(logPath: string, maxBytes: number): { text: string; truncated: boolean } {
  const fd = openRunLog(logPath, false);
  if (fd === null) throw Object.assign(new Error(`ENOENT: no such file, open '${logPath}'`), { code: 'ENOENT' });
  try {
    return tailFd(fd, maxBytes);
  } finally {
    fs.closeSync(fd);
  }
}
