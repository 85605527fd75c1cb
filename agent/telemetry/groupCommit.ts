/**
 * Group commit: writes that arrive while the event loop turns are collected and handed to `write`
 * together on the next turn (one SQLite transaction, one fsync for all of them); each caller's
 * promise resolves after the write that holds its items. `write` never throws (the spool holds in
 * memory what no file takes). `flushNow` writes at once, for a synchronous writer that must come
 * after what is queued (emit) and for close.
 */
export class GroupCommit<T> {
  private items: T[] = [];
  private waiters: Array<() => void> = [];
  private scheduled: NodeJS.Immediate | null = null;

  constructor(private readonly write: (items: T[]) => void) {}

  add(item: T): Promise<void> {
    this.items.push(item);
    this.scheduled ??= setImmediate(() => this.flushNow());
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Items queued and not yet written (newest last). */
  queued(): readonly T[] {
    return this.items;
  }

  flushNow(): void {
    if (this.scheduled !== null) clearImmediate(this.scheduled);
    this.scheduled = null;
    if (this.items.length === 0) return;
    const items = this.items;
    const waiters = this.waiters;
    this.items = [];
    this.waiters = [];
    try {
      this.write(items);
    } finally {
      for (const resolve of waiters) resolve();
    }
  }
}
