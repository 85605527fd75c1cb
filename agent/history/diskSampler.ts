import type { DiskStatus } from '../../shared/protocol';
import { systemClock, type Clock, type Timer } from '../schedule/clock';
import type { HistoryStore } from './historyStore';

/**
 * Records free disk space into the history at the disk gate's poll interval, from the gate's last
 * measurement (the gate itself publishes only changes, the chart needs a sample every poll).
 * Returns the function that stops it.
 */
export function startDiskSampler(
  store: HistoryStore,
  status: () => DiskStatus | null,
  pollSeconds: number,
  clock: Clock = systemClock,
): () => void {
  let timer: Timer | null = null;
  let stopped = false;
  const tick = () => {
    if (stopped) return;
    const disk = status();
    if (disk) {
      try {
        store.addDiskSample(disk.freeGb, disk.state);
      } catch {
        // A full or read-only disk must not stop the agent; the chart shows a gap.
      }
    }
    timer = clock.setTimer(tick, Math.max(0.2, pollSeconds) * 1000);
  };
  tick();
  return () => {
    stopped = true;
    timer?.cancel();
  };
}
