import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { TestContext } from 'node:test';

/**
 * A real tmpfs of `mb` MB mounted for the test (root only), unmounted after it; null when this
 * process may not mount (not root): the caller then says so and skips, since a full disk cannot be
 * made without one. As root a failed mount is an error, never a silent pass.
 */
export function mountSmallTmpfs(t: TestContext, mb: number): string | null {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quantilica-full-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${mb}m,mode=0700`, 'tmpfs', dir], { stdio: 'pipe' });
  } catch (err) {
    fs.rmdirSync(dir);
    if (process.getuid?.() === 0) throw err;
    t.diagnostic(`NO MOUNT POSSIBLE (not root): ${(err as Error).message.split('\n')[0]}`);
    return null;
  }
  t.after(() => {
    execFileSync('umount', ['-l', dir]);
    fs.rmdirSync(dir);
  });
  return dir;
}

/** Writes zeros into `file` until the filesystem refuses: a real child process, as a fetcher would. */
export function fillUp(file: string): void {
  for (const bs of ['1M', '4k']) {
    try {
      execFileSync('dd', ['if=/dev/zero', `of=${file}.${bs}`, `bs=${bs}`, 'status=none'], { stdio: 'pipe' });
    } catch {
      // dd ends with ENOSPC: that is the point.
    }
  }
}

export function freeUp(file: string): void {
  for (const bs of ['1M', '4k']) fs.rmSync(`${file}.${bs}`, { force: true });
}
