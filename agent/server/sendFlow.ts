import { WebSocket } from 'ws';

export interface SendFlowLimits {
  /** Past this many bytes not yet taken by the client, it is dropped. */
  capBytes: number;
  /** At or above this many bytes the agent stops answering the client's requests until it reads. */
  highWaterBytes: number;
  /** A client that takes nothing for this long while over the high-water mark is dropped. */
  stallTimeoutMs: number;
}

/** How many waiting requests one completed write lets through; keeps overshoot past high water small. */
const RELEASE_BATCH = 16;

/**
 * While changes stream (the previous write left less than WRITE_BURST_GAP_MS ago), the frames of the next
 * WRITE_WINDOW_MS leave in one write. Each write to a loopback socket costs the agent a system call
 * and the TCP stack's delivery to the client, whatever its size: under a burst of runs that cost was
 * paid a few times per run. Outside a burst a frame still leaves at the end of its tick.
 */
export const WRITE_WINDOW_MS = 4;
export const WRITE_BURST_GAP_MS = 20;

/** When the frames sent in a burst leave (see WRITE_WINDOW_MS). */
export interface WriteTiming {
  windowMs: number;
  burstGapMs: number;
}

/**
 * Sends text frames on one WebSocket and watches how much the client has not taken yet. Requests
 * wait for `ready()` before they produce an answer, so a client that floods requests gets flow
 * control instead of growing the agent's memory; pushed changes cannot wait, so a client that stops
 * reading is dropped, past the cap or after the stall timeout, whichever comes first.
 */
export class SendFlow {
  private readonly waiters: Array<() => void> = [];
  private corked = false;
  /** The burst's window, while its frames wait; null outside one (a tick's frames leave at its end). */
  private windowTimer: NodeJS.Timeout | null = null;
  private lastWrite = -Infinity;
  private stallTimer: NodeJS.Timeout | null = null;
  private disposed = false;

  constructor(
    private readonly ws: WebSocket,
    private readonly limits: SendFlowLimits,
    private readonly onOverflow: (reason: string) => void,
    /** The connection's TCP socket: frames sent in one tick leave in one write (see send). */
    private readonly transport: { cork(): void; uncork(): void } | null = null,
    private readonly timing: WriteTiming = { windowMs: WRITE_WINDOW_MS, burstGapMs: WRITE_BURST_GAP_MS },
  ) {}

  send(text: string): Promise<void> {
    if (this.disposed || this.ws.readyState !== WebSocket.OPEN) {
      return Promise.reject(new Error('the connection is closed'));
    }
    // A burst of runs makes several changes per tick (a run's move, its pool, the next run's grant),
    // and a change every fraction of a millisecond: one write system call for the frames of a tick,
    // and while the burst lasts for those of a short window (a client sees a change at most
    // windowMs later). A frame sent after a quiet spell is on its way by the end of its tick.
    if (this.transport !== null && !this.corked) {
      this.corked = true;
      this.transport.cork();
      if (performance.now() - this.lastWrite < this.timing.burstGapMs) this.windowTimer = setTimeout(this.uncork, this.timing.windowMs);
      else process.nextTick(this.uncork);
    }
    return new Promise((resolve, reject) => {
      this.ws.send(text, (err) => {
        this.written();
        if (err) reject(err);
        else resolve();
      });
      // Frames held that make a large write already leave, whether a window or the tick holds them:
      // what is held counts as not taken by the client (check), and a flood of changes must not look
      // like a client that stopped reading.
      if (this.corked && this.ws.bufferedAmount >= this.limits.highWaterBytes / 4) this.uncork();
      this.check();
    });
  }

  /** Lets the frames held since the cork go, in one write; each cork gets exactly one uncork. */
  private readonly uncork = (): void => {
    if (!this.corked || this.transport === null) return;
    if (this.windowTimer !== null) clearTimeout(this.windowTimer);
    this.windowTimer = null;
    this.corked = false;
    this.lastWrite = performance.now();
    this.transport.uncork();
  };

  /** Resolves when the client has taken enough of what was sent that one more answer may be made. */
  ready(): Promise<void> {
    if (this.waiters.length === 0 && this.ws.bufferedAmount < this.limits.highWaterBytes) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  dispose(): void {
    this.disposed = true;
    if (this.stallTimer) clearTimeout(this.stallTimer);
    this.stallTimer = null;
    // A window's timer must not outlive the connection (nor hold a process that is ending).
    this.uncork();
    // Waiting handlers run on and find the connection closed when they answer.
    for (const release of this.waiters.splice(0)) release();
  }

  private check(): void {
    const buffered = this.ws.bufferedAmount;
    if (buffered > this.limits.capBytes) {
      this.overflow(`${buffered} bytes not taken by the client, over the cap of ${this.limits.capBytes}`);
    } else if (buffered >= this.limits.highWaterBytes && this.stallTimer === null) {
      this.stallTimer = setTimeout(() => {
        this.overflow(`the client took nothing for ${this.limits.stallTimeoutMs} ms with ${this.ws.bufferedAmount} bytes pending`);
      }, this.limits.stallTimeoutMs);
      this.stallTimer.unref();
    }
  }

  private written(): void {
    if (this.disposed) return;
    const buffered = this.ws.bufferedAmount;
    if (this.stallTimer) {
      if (buffered < this.limits.highWaterBytes / 2) {
        clearTimeout(this.stallTimer);
        this.stallTimer = null;
      } else {
        // The client is taking data, only slowly: that is not a stall.
        this.stallTimer.refresh();
      }
    }
    if (buffered < this.limits.highWaterBytes) {
      for (const release of this.waiters.splice(0, RELEASE_BATCH)) release();
    }
  }

  private overflow(reason: string): void {
    if (this.disposed) return;
    this.dispose();
    this.onOverflow(reason);
  }
}
