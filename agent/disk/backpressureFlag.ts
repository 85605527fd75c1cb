import * as fs from 'node:fs';
import * as path from 'node:path';

/** The flag the operations standard (seed 000, section 4) puts in DATA_DIR while disk space is short. */
export const BACKPRESSURE_FLAG = '.backpressure';

/**
 * Makes `DATA_DIR/.backpressure` exist exactly when `present` is true. The content says why, for
 * a person who finds the file; scripts only test its existence. Written to a temporary name and
 * renamed, so a reader never sees a half-written file. Resolves to an error text or null.
 */
export async function syncBackpressureFlag(dataDir: string, present: boolean, content: object): Promise<string | null> {
  const flag = path.join(dataDir, BACKPRESSURE_FLAG);
  try {
    if (present) {
      const tmp = `${flag}.${process.pid}.tmp`;
      await fs.promises.writeFile(tmp, `${JSON.stringify(content)}\n`);
      await fs.promises.rename(tmp, flag);
    } else {
      await fs.promises.rm(flag, { force: true });
    }
    return null;
  } catch (err) {
    return `cannot ${present ? 'create' : 'remove'} ${flag}: ${(err as Error).message}`;
  }
}
