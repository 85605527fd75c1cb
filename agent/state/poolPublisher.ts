import type { PoolState } from '../../shared/protocol';
import type { Clock } from '../schedule/clock';
import { PublishThrottle, throttleClock } from './publishThrottle';
import type { StateHub } from './stateHub';

/**
 * The pools' pictures: a change after a quiet window is published at once; changes inside the window
 * after a publication wait for one trailing publication at its end. Each computation reads
 * /proc/locks, lstats and opens every slot file, and a burst of runs changes a pool several times per
 * run: publishing each change cost the main thread about a seventh of its time. 30 ms keeps a burst
 * to about thirty pictures a second while a slot change reaches the views within 30 ms (a snapshot is
 * always computed fresh). Under load one computation takes longer (the lock table grows, /proc reads
 * wait): the window then grows with it, to three times the last one's cost, so publishing takes at
 * most about a quarter of the thread and a change still reaches the views within 100 ms (a tenth
 * held a slow picture back for 150-200 ms at 100 waiting runs; the slots benchmark's throughput is
 * the same with either).
 */
export const POOL_PUBLISH_WINDOW_MS = 30;
export const POOL_PUBLISH_COST_SHARE = 3;

/**
 * Publishes the pictures of the pools that changed, every pool changed meanwhile together (see
 * PublishThrottle), and only while someone listens: a picture reads the kernel's lock table and every
 * lock file.
 */
export class PoolPublisher {
  private readonly dirty = new Set<string>();
  private closed = false;
  private readonly throttle: PublishThrottle;

  constructor(
    private readonly hub: Pick<StateHub, 'hasListeners' | 'publish'>,
    private readonly statesOf: (names: string[]) => PoolState[],
    clock: Pick<Clock, 'setTimer'> & { elapsed(): number } = throttleClock,
  ) {
    this.throttle = new PublishThrottle(() => this.publishDirty(), clock, {
      windowMs: POOL_PUBLISH_WINDOW_MS,
      costShare: POOL_PUBLISH_COST_SHARE,
    });
  }

  /** Marks a pool changed. */
  changed(name: string): void {
    if (this.closed || !this.hub.hasListeners()) return;
    this.dirty.add(name);
    this.throttle.changed();
  }

  /** Drops what is pending; later changes are ignored (the pools are closing). */
  close(): void {
    this.closed = true;
    this.throttle.cancel();
    this.dirty.clear();
  }

  /** One reading for every pool changed since the last; returns its cost in ms. */
  private publishDirty(): number {
    const names = [...this.dirty];
    this.dirty.clear();
    if (this.closed || !this.hub.hasListeners()) return 0;
    const began = performance.now();
    for (const pool of this.statesOf(names)) this.hub.publish({ kind: 'pool', pool });
    return performance.now() - began;
  }
}
