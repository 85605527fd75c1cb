import { constants, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks';
import * as v8 from 'node:v8';
import * as vm from 'node:vm';
import type { Logger } from '../log/logger';
import { keepYoungGenerationSmall } from './youngGeneration';

/** Runs ended since the last collection below which a drained queue is not worth a pause. */
const BURST_RUNS = 100;
/** How long the queue stays empty before the collection: a burst that pauses between batches is not cut. */
const QUIET_MS = 1000;
/** How long a collection V8 was asked to start may take before gc() does it instead. */
const MARKING_WAIT_MS = 2000;

/** A 'gc' performance entry: `detail.kind` says which collector ran. */
type GcEntry = PerformanceEntry & { detail?: { kind?: number } };

/**
 * The agent's heap after a burst of queued runs. Live data is back to ~15 MB once they end, but V8
 * keeps what it grew for them: a young generation of 2 × 16 MB semi-spaces and old space full of
 * promoted garbage, which the memory reducer of an idle process does not give back (RSS 66 MB before
 * 1,000 queued no-op runs, 116 MB 5 s after). So the young generation is kept at its starting size
 * (the burst's throughput is the same: its objects die young; the agent's main.ts sets that first,
 * `install` again for a process that did not, see youngGeneration.ts), and once the queue has been empty
 * for a second after at least BURST_RUNS runs, two full collections (the second frees what the
 * first's finalizers released) hand the old space's pages back; then `release` gives back what the
 * C side keeps (SQLite's page cache, the allocator's free pages).
 *
 * Where `startMarking` is given (quantilica-heap.c), the two collections are ones V8 runs itself,
 * through incremental marking, rather than gc()'s atomic ones. Those do not retain maps: the maps of
 * the burst's objects die with them, every optimized function that embedded one is thrown away, and
 * the next burst compiles them all again, 0.3-0.5 ms of CPU per run (docs/benchmarks.md, "The
 * collection after a burst and the compiled code"). A collection that does not come within
 * MARKING_WAIT_MS is made with gc().
 * Only the long-lived agent does this; a CLI's heap ends with it.
 */
export class BurstHeap {
  private endedSinceCollect = 0;
  private timer: NodeJS.Timeout | null = null;
  /** Bumped when runs come back: a collection under way then neither releases nor counts as done. */
  private round = 0;
  private collecting = false;

  private constructor(
    private readonly collect: () => void,
    private readonly release: () => void,
    private readonly logger: Logger,
    private readonly startMarking: (() => boolean) | null,
  ) {}

  /**
   * Sets the process's young generation and makes a full collection callable; null if V8 refuses.
   * `startMarking` has V8 start a collection of its own (NativeHeap); without it, gc() collects.
   */
  static install(logger: Logger, release: () => void, startMarking: (() => boolean) | null = null): BurstHeap | null {
    try {
      keepYoungGenerationSmall();
      // The flag makes `gc` exist in contexts made from now on; the agent's own global stays as it was.
      v8.setFlagsFromString('--expose-gc');
      const gc: unknown = vm.runInNewContext('gc');
      if (typeof gc !== 'function') return null;
      return new BurstHeap(gc as () => void, release, logger, startMarking);
    } catch (err) {
      logger.debug({ err }, 'heap settings for bursts not available');
      return null;
    }
  }

  /** A run entered the queue or started: no collection while runs are in flight. */
  busy(): void {
    this.round += 1;
    if (this.timer === null) return;
    clearTimeout(this.timer);
    this.timer = null;
  }

  /** A run ended. */
  runEnded(): void {
    this.endedSinceCollect += 1;
  }

  /** No run of this agent waits or runs. */
  idle(): void {
    if (this.endedSinceCollect < BURST_RUNS || this.timer !== null || this.collecting) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.collecting = true;
      void this.collectAfterBurst(this.round).finally(() => (this.collecting = false));
    }, QUIET_MS);
    this.timer.unref();
  }

  private async collectAfterBurst(round: number): Promise<void> {
    const began = performance.now();
    let by: 'v8' | 'gc' = 'v8';
    for (let i = 0; i < 2; i++) {
      if (this.startMarking === null || !(await this.markingCollection())) {
        by = 'gc';
        this.collect();
      }
      // Runs came back meanwhile: the quiet second after them collects.
      if (round !== this.round) return;
    }
    this.release();
    this.logger.debug({ runs: this.endedSinceCollect, ms: Math.round(performance.now() - began), by }, 'collected the heap after a burst');
    this.endedSinceCollect = 0;
  }

  /** Has V8 start a collection of its own and resolves once a mark-compact ended: true, or false if none came. */
  private markingCollection(): Promise<boolean> {
    return new Promise((resolve) => {
      const observer = new PerformanceObserver((list) => {
        const major = list.getEntries().some((e) => (e as GcEntry).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR);
        if (major) done(true);
      });
      const timer = setTimeout(() => done(false), MARKING_WAIT_MS);
      timer.unref();
      const done = (collected: boolean) => {
        observer.disconnect();
        clearTimeout(timer);
        resolve(collected);
      };
      observer.observe({ entryTypes: ['gc'] });
      if (this.startMarking?.() !== true) done(false);
    });
  }

  close(): void {
    this.busy();
  }
}
