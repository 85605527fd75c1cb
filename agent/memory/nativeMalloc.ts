import type { Logger } from '../log/logger';
import { loadNodeApiModule } from './loadNodeApiModule';

/** What agent/native/quantilica-malloc.c exports: glibc's allocator, asked by the agent itself. */
export interface NativeMalloc {
  /** malloc_trim(0): every arena's free pages back to the kernel; true if any were. */
  trim(): boolean;
  /** mallopt(M_ARENA_MAX, n) for the threads that allocate from now on; true if glibc took it. */
  limitArenas(n: number): boolean;
  /** mallopt(M_MMAP_THRESHOLD and M_TRIM_THRESHOLD, bytes), no longer raised by glibc; true if it took both. */
  holdThresholds(bytes: number): boolean;
}

/**
 * Loads dist/quantilica-malloc.node; null when it was not built (no C compiler, not glibc) or cannot
 * be loaded here. The agent works the same without it, with more memory kept after a burst.
 */
export function loadNativeMalloc(file: string, logger: Logger): NativeMalloc | null {
  try {
    return loadNodeApiModule(file, ['trim', 'limitArenas', 'holdThresholds']) as unknown as NativeMalloc;
  } catch (err) {
    logger.debug(
      { file, err: (err as Error).message },
      "the C allocator's trim is not available: its free memory stays with the agent after a burst",
    );
    return null;
  }
}
