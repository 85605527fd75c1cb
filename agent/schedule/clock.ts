export interface Timer {
  cancel(): void;
}

/** Wall time and timers, injectable so a test can drive a simulated day in milliseconds. */
export interface Clock {
  now(): Date;
  /** Calls `fn` once after `ms` of elapsed (monotonic) time; must not keep the process alive. */
  setTimer(fn: () => void, ms: number): Timer;
}

export const systemClock: Clock = {
  now: () => new Date(),
  setTimer(fn, ms) {
    const t = setTimeout(fn, ms);
    t.unref();
    return { cancel: () => clearTimeout(t) };
  },
};
