/** A run as the agent answers `waitRun`: what the cycle of its slot is read from. */
export interface CycledRun {
  pool: string;
  slot: number | null;
  startedAt: string | null;
  finishedAt: string | null;
}

/** How one pool's slots turned over during a burst: its runs one after another on each slot. */
export interface SlotCycle {
  pool: string;
  slots: number;
  runs: number;
  /** When the pool's last run ended, from the burst's start (ms). */
  lastEndMs: number;
  /** From a run's spawn to its end as the agent recorded it, on average (ms). */
  spawnToEndMs: number;
  /** From a run's recorded end to the next run's spawn on the same slot, on average (ms). */
  endToSpawnMs: number;
}

/**
 * Each pool's slot cycle in a burst, from the runs' recorded start and end: a pool with few slots
 * and as many runs as the others turns over most often, and the burst lasts as long as its slots'
 * cycles do. Runs without a slot or a time (a run that never started) are left out.
 */
export function slotCycles(runs: readonly CycledRun[], burstStartMs: number): SlotCycle[] {
  const byPool = new Map<string, Map<number, Array<{ start: number; end: number }>>>();
  for (const run of runs) {
    if (run.slot === null || run.startedAt === null || run.finishedAt === null) continue;
    const slots = byPool.get(run.pool) ?? new Map<number, Array<{ start: number; end: number }>>();
    byPool.set(run.pool, slots);
    const onSlot = slots.get(run.slot) ?? [];
    slots.set(run.slot, onSlot);
    onSlot.push({ start: Date.parse(run.startedAt), end: Date.parse(run.finishedAt) });
  }
  const cycles: SlotCycle[] = [];
  for (const [pool, slots] of byPool) {
    let count = 0;
    let lastEnd = -Infinity;
    let running = 0;
    let gaps = 0;
    let gapCount = 0;
    for (const onSlot of slots.values()) {
      onSlot.sort((a, b) => a.start - b.start);
      onSlot.forEach((r, i) => {
        count += 1;
        running += r.end - r.start;
        lastEnd = Math.max(lastEnd, r.end);
        if (i > 0) {
          gaps += r.start - onSlot[i - 1].end;
          gapCount += 1;
        }
      });
    }
    cycles.push({
      pool,
      slots: slots.size,
      runs: count,
      lastEndMs: lastEnd - burstStartMs,
      spawnToEndMs: running / count,
      endToSpawnMs: gapCount === 0 ? 0 : gaps / gapCount,
    });
  }
  return cycles.sort((a, b) => a.lastEndMs - b.lastEndMs);
}
