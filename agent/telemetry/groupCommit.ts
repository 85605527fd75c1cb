/**
 * How long a commit waits for more writers while a burst is on (the previous commit was this
 * recent). The protocol library hands the agent one request per event-loop turn, so a burst of
 * enqueues arrives over many turns: committing on each turn's setImmediate gave every enqueue its
 * own fsync. Outside a burst a commit still goes on the next turn.
 */
export const GROUP_COMMIT_WINDOW_MS = 2;

/** A commit this soon after the previous one means a burst is on: it waits the window. */
export const BURST_GAP_MS = 10;

/**
 * Group commit: writes that arrive while the event loop turns are collected and handed to `write`
 * together (one SQLite transaction, one fsync for all of them): on the next turn, or, during a
 * burst (the previous write less than BURST_GAP_MS ago), after a window of GROUP_COMMIT_WINDOW_MS that gathers the writers of the following turns.
 * Each caller's promise resolves after the write that holds its items, never before. `write` never
 * throws (the spool holds in memory what no file takes). `flushNow` writes at once, for a
 * synchronous writer that must come after what is queued (emit) and for close. An item added with
 * `nextTurn` (something idle waits for it: a slot held for a spawn) ends a gathering window early:
 * the write holding it, and everything gathered so far, goes on the next turn.
 */
export class GroupCommit<T> {
  private items: T[] = [];
  private waiters: Array<() => void> = [];
  /** Cancels the scheduled write; null when none is scheduled. */
  private scheduled: (() => void) | null = null;
  /** Whether the scheduled write waits for the gathering window (rather than the next turn). */
  private windowed = false;
  private lastWrite = -Infinity;
  /** Resolves once every write so far is durable. */
  private answered: Promise<void> = Promise.resolve();

  constructor(
    /** Returns a promise when the items are written but durable only once it resolves (WalSync). */
    private readonly write: (items: T[]) => void | Promise<void>,
    private readonly timing: { windowMs: number; burstGapMs: number } = { windowMs: GROUP_COMMIT_WINDOW_MS, burstGapMs: BURST_GAP_MS },
  ) {}

  add(item: T, nextTurn = false): Promise<void> {
    this.items.push(item);
    if (this.scheduled !== null && nextTurn && this.windowed) {
      this.scheduled();
      this.scheduled = null;
    }
    if (this.scheduled === null) this.schedule(nextTurn);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Items queued and not yet written (newest last). */
  queued(): readonly T[] {
    return this.items;
  }

  flushNow(): void {
    this.scheduled?.();
    this.scheduled = null;
    if (this.items.length === 0) return;
    const items = this.items;
    const waiters = this.waiters;
    this.items = [];
    this.waiters = [];
    let durable: void | Promise<void> = undefined;
    try {
      durable = this.write(items);
    } finally {
      this.lastWrite = performance.now();
      // Callers are answered in the order of their writes, each once its write is durable.
      this.answered = durable instanceof Promise ? Promise.all([this.answered, durable]).then(() => undefined) : this.answered;
      void this.answered.then(() => {
        for (const resolve of waiters) resolve();
      });
    }
  }

  private schedule(nextTurn: boolean): void {
    const flush = () => {
      this.scheduled = null;
      this.flushNow();
    };
    this.windowed = !nextTurn && this.timing.windowMs > 0 && performance.now() - this.lastWrite < this.timing.burstGapMs;
    if (this.windowed) {
      const timer = setTimeout(flush, this.timing.windowMs);
      this.scheduled = () => clearTimeout(timer);
    } else {
      const immediate = setImmediate(flush);
      this.scheduled = () => clearImmediate(immediate);
    }
  }
}
