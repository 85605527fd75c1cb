import type { Logger } from '../log/logger';
import { loadNodeApiModule } from './loadNodeApiModule';

/** What agent/native/quantilica-heap.c exports: a collection that V8 runs the way it runs its own. */
export interface NativeHeap {
  /** Reports `bytes` of memory outside the heap, then takes them back: V8 starts incremental marking; true if both were taken. */
  reportExternalMemory(bytes: number): boolean;
}

/**
 * Loads dist/quantilica-heap.node; null when it was not built (no C compiler) or cannot be loaded
 * here. Without it the collection after a burst is gc()'s, and the next burst compiles its hot code again.
 */
export function loadNativeHeap(file: string, logger: Logger): NativeHeap | null {
  try {
    return loadNodeApiModule(file, ['reportExternalMemory']) as unknown as NativeHeap;
  } catch (err) {
    logger.debug(
      { file, err: (err as Error).message },
      "the heap's own collection is not available: the one after a burst discards the compiled code",
    );
    return null;
  }
}
