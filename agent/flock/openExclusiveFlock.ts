import * as fs from 'node:fs';
import { flockSync } from 'fs-ext';

/**
 * Opens a file and takes a non-blocking exclusive flock(2) on it: the locked descriptor, or null when
 * another open file description holds the lock (the descriptor is then closed). Any other failure
 * (EBADF, ENOLCK…) is thrown. Node opens with O_CLOEXEC: the descriptor reaches no child unless it
 * is handed over explicitly.
 */
export function openExclusiveFlock(file: string, flags: number | string, mode = 0o644): number | null {
  const fd = fs.openSync(file, flags, mode);
  try {
    flockSync(fd, 'exnb');
    return fd;
  } catch (err) {
    fs.closeSync(fd);
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EAGAIN' || code === 'EWOULDBLOCK') return null;
    throw err;
  }
}
