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
