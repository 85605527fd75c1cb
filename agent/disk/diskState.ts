import type { DiskGateState, DiskStatus } from '../../shared/protocol';
import type { DiskConfig } from '../config/config';

/**
 * GB in the settings are binary gigabytes (GiB), the unit of `df -h` and `df -BG`, which is how
 * operators read free space and what the shell orchestrator compared against.
 */
export const BYTES_PER_GB = 1024 ** 3;

/**
 * The state after a successful measurement. `latched` says the gate was paused before (possibly
 * interrupted by an `unknown` spell): a paused gate opens only at or above the resume level, so
 * freeing space to somewhere between pause and resume keeps it paused (hysteresis).
 */
export function nextDiskState(freeGb: number, latched: boolean, disk: DiskConfig): Exclude<DiskGateState, 'unknown'> {
  if (freeGb < disk.pauseGb) return 'paused';
  if (latched && freeGb < disk.resumeGb) return 'paused';
  if (freeGb < disk.warnGb) return 'warn';
  return 'ok';
}

/** The threshold whose crossing changes `state` next, for the extension's gauge. */
export function nextThreshold(state: DiskGateState, freeGb: number | null, disk: DiskConfig): DiskStatus['next'] {
  if (freeGb === null) return null;
  const to = (threshold: 'warn' | 'pause' | 'resume', gb: number) => ({ threshold, gb, distanceGb: round(Math.abs(freeGb - gb)) });
  switch (state) {
    case 'ok':
      return to('warn', disk.warnGb);
    case 'warn':
      // Both directions change the state; the nearer crossing is the one worth showing.
      return freeGb - disk.pauseGb <= disk.warnGb - freeGb ? to('pause', disk.pauseGb) : to('warn', disk.warnGb);
    case 'paused':
      return to('resume', disk.resumeGb);
    case 'unknown':
      return null;
  }
}

/** GB to three decimals (1 MB): finer than any threshold anyone sets, coarse enough to read. */
export function round(gb: number): number {
  return Math.round(gb * 1000) / 1000;
}
