import * as fs from 'node:fs';
import * as path from 'node:path';

/**
 * Microseconds to make one new file in `dir` (made, closed), the median of `files`. Each run makes
 * its log and its status file, and the cost moves with the filesystem's state: on an ext4 without a
 * journal a file made soon after many were deleted in the same block group waits while the kernel
 * skips each recently freed inode (recently_deleted() in fs/ext4/ialloc.c), from ~20 µs to ~500 µs.
 * So it is measured in the folder the runs' logs go to (a file goes to its folder's block group), and
 * the files stay until the station is removed: removing them would slow the runs that follow.
 */
export function fileCreationMicros(dir: string, files = 300): number {
  const flags = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL;
  const times: number[] = [];
  for (let i = 0; i < files; i++) {
    const started = process.hrtime.bigint();
    fs.closeSync(fs.openSync(path.join(dir, `.bench-probe-${process.pid}-${i}`), flags, 0o600));
    times.push(Number(process.hrtime.bigint() - started) / 1000);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)];
}
