import { EventEmitter } from 'node:events';
import type { Change, ChangedParams, Snapshot } from '../../shared/protocol';

export type SnapshotParts = Omit<Snapshot, 'version'>;

/**
 * The one place where the agent's observable state gets its version. Every module that changes
 * something a client shows calls `publish`; the version goes up by exactly one per change, so a
 * client can tell a gap (resynchronise) from a duplicate (ignore).
 */
export class StateHub {
  private version = 0;
  private readonly emitter = new EventEmitter();

  constructor(private readonly collect: () => SnapshotParts) {
    // Every connected client and CLI waiter listens; the default cap of 10 would warn falsely.
    this.emitter.setMaxListeners(0);
  }

  publish(change: Change): void {
    this.version += 1;
    const params: ChangedParams = { version: this.version, change };
    this.emitter.emit('change', params);
    this.emitter.emit('observe', params);
  }

  /** True when someone listens; lets a publisher skip building a change nobody will see. */
  hasListeners(): boolean {
    return this.emitter.listenerCount('change') > 0;
  }

  snapshot(): Snapshot {
    return { version: this.version, ...this.collect() };
  }

  /**
   * Like onChange, for the agent's own derivations (operator events, metrics): they see every change
   * but do not count as a listener, so publishers still skip what only a client would look at.
   */
  observe(listener: (params: ChangedParams) => void): () => void {
    this.emitter.on('observe', listener);
    return () => this.emitter.off('observe', listener);
  }

  onChange(listener: (params: ChangedParams) => void): () => void {
    this.emitter.on('change', listener);
    return () => this.emitter.off('change', listener);
  }
}
