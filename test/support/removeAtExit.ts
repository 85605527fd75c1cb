import * as fs from 'node:fs';

/** Folders this process made in /tmp, removed when it exits. */
const made = new Set<string>();

/**
 * Removes a folder this process made (a test station, a benchmark's station) when the process exits,
 * so a suite or a benchmark leaves nothing in the machine's temp folder. At exit, never before: on
 * ext4 without a journal (this project's VMs) a removal makes the files made in the next minutes
 * dearer, which a benchmark's later phases would pay. A folder that cannot be removed is said on
 * stderr, not thrown from the exit handler.
 */
export function removeAtExit(dir: string): void {
  if (made.size === 0)
    process.once('exit', () => {
      for (const one of made) {
        try {
          fs.rmSync(one, { recursive: true, force: true });
        } catch (err) {
          process.stderr.write(`could not remove ${one}: ${(err as Error).message}\n`);
        }
      }
    });
  made.add(dir);
}
