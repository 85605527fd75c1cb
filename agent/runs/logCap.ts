import * as fs from 'node:fs';

/**
 * Keeps a run log under its cap while the fetcher writes to it. The fetcher holds the file open with
 * O_APPEND (a pipe through the agent would kill it with SIGPIPE if the agent died), so the log is
 * capped by copy-truncate: keep the newest half of the cap behind a marker line. The agent does this
 * on a timer and once more when the run ends.
 */
export function capLogFile(logPath: string, capBytes: number): boolean {
  let size: number;
  try {
    size = fs.statSync(logPath).size;
  } catch {
    return false;
  }
  if (size <= capBytes) return false;
  const keep = Math.floor(capBytes / 2);
  const fd = fs.openSync(logPath, 'r+');
  try {
    const tail = Buffer.alloc(keep);
    const read = fs.readSync(fd, tail, 0, keep, size - keep);
    const marker = Buffer.from(`[quantilica: log over its cap of ${capBytes} bytes; ${size - read} earlier bytes dropped]\n`);
    fs.ftruncateSync(fd, 0);
    fs.writeSync(fd, marker, 0, marker.length, 0);
    fs.writeSync(fd, tail, 0, read, marker.length);
  } finally {
    fs.closeSync(fd);
  }
  return true;
}

/**
 * Caps the logs of running fetchers as they grow. A timer alone let a fast writer put hundreds of MB
 * into a log between two checks; an inotify watch (fs.watch) on each log wakes the agent on every
 * write, and the check truncates at once. The overshoot is bounded by what the fetcher writes
 * between its write and the agent's next turn of the event loop (README, "Log cap"). The timer stays
 * as a backstop for filesystems without inotify.
 */
export class LogCapper {
  private readonly watched = new Map<string, fs.FSWatcher | null>();
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly capBytes: number, backstopMs = 1000) {
    this.timer = setInterval(() => { for (const p of this.watched.keys()) capLogFile(p, this.capBytes); }, backstopMs);
    this.timer.unref();
  }

  watch(logPath: string): void {
    if (this.watched.has(logPath)) return;
    let watcher: fs.FSWatcher | null = null;
    try {
      watcher = fs.watch(logPath, { persistent: false }, () => { capQuietly(logPath, this.capBytes); });
      watcher.on('error', () => { /* the log went away; the backstop timer and unwatch deal with it */ });
    } catch {
      watcher = null;
    }
    this.watched.set(logPath, watcher);
    capQuietly(logPath, this.capBytes);
  }

  /** Stops watching and caps once more (the last writes of the run). */
  unwatch(logPath: string): void {
    const watcher = this.watched.get(logPath);
    watcher?.close();
    this.watched.delete(logPath);
    capQuietly(logPath, this.capBytes);
  }

  close(): void {
    clearInterval(this.timer);
    for (const w of this.watched.values()) w?.close();
    this.watched.clear();
  }
}

function capQuietly(logPath: string, capBytes: number): void {
  try {
    capLogFile(logPath, capBytes);
  } catch {
    // A log that cannot be opened now (deleted, permissions) is tried again on the next event.
  }
}

/** Reads at most the last `maxBytes` of a log. */
export function tailFile(logPath: string, maxBytes: number): { text: string; truncated: boolean } {
  const fd = fs.openSync(logPath, 'r');
  try {
    const size = fs.fstatSync(fd).size;
    const length = Math.min(size, maxBytes);
    const buf = Buffer.alloc(length);
    fs.readSync(fd, buf, 0, length, size - length);
    return { text: buf.toString('utf8'), truncated: size > length };
  } finally {
    fs.closeSync(fd);
  }
}
