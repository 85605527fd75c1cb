import * as fs from 'node:fs';
import * as path from 'node:path';

/**
 * Bytes a directory tree occupies on disk (like `du -s`), 0 when it does not exist. Allocated
 * blocks rather than file sizes, because the gate compares growth with free space, and sparse or
 * preallocated files take space that their size does not show. Files that vanish during the walk
 * (an ingest daemon removing what it uploaded) are skipped, not errors.
 */
export async function dirUsage(dir: string): Promise<number> {
  let names: fs.Dirent[];
  try {
    names = await fs.promises.readdir(dir, { withFileTypes: true, recursive: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw err;
  }
  let total = 0;
  for (const entry of names) {
    try {
      const st = await fs.promises.lstat(path.join(entry.parentPath, entry.name));
      total += st.blocks * 512;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
  return total;
}
