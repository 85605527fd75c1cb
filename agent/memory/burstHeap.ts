import * as v8 from 'node:v8';
import * as vm from 'node:vm';
import type { Logger } from '../log/logger';
import { keepYoungGenerationSmall } from './youngGeneration';

/** Runs ended since the last collection below which a drained queue is not worth a pause. */
const BURST_RUNS = 100;
/** How long the queue stays empty before the collection: a burst that pauses between batches is not cut. */
const QUIET_MS = 1000;

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
 * Only the long-lived agent does this; a CLI's heap ends with it.
 */
export class BurstHeap {
  private endedSinceCollect = 0;
  private timer: NodeJS.Timeout | null = null;

  private constructor(
    private readonly collect: () => void,
    private readonly release: () => void,
    private readonly logger: Logger,
  ) {}

  /** Sets the process's young generation and makes a full collection callable; null if V8 refuses. */
  static install(logger: Logger, release: () => void): BurstHeap | null {
    try {
      keepYoungGenerationSmall();
      // The flag makes `gc` exist in contexts made from now on; the agent's own global stays as it was.
      v8.setFlagsFromString('--expose-gc');
      const gc: unknown = vm.runInNewContext('gc');
      if (typeof gc !== 'function') return null;
      return new BurstHeap(gc as () => void, release, logger);
    } catch (err) {
      logger.debug({ err }, 'heap settings for bursts not available');
      return null;
    }
  }

  /** A run entered the queue or started: no collection while runs are in flight. */
  busy(): void {
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
    if (this.endedSinceCollect < BURST_RUNS || this.timer !== null) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      const began = performance.now();
      this.collect();
      this.collect();
      this.release();
      this.logger.debug({ runs: this.endedSinceCollect, ms: Math.round(performance.now() - began) }, 'collected the heap after a burst');
      this.endedSinceCollect = 0;
    }, QUIET_MS);
    this.timer.unref();
  }

  close(): void {
    this.busy();
  }
}
