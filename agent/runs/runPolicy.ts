import type { RunReason, RunStatus } from '../../shared/protocol';
import { isGithubSync, RETRY_DEFAULTS, type CatalogEntry } from '../catalog/catalog';

/** What the run manager applies to each try of a run: the catalog entry's policy with its defaults. */
export interface RunPolicy {
  attempts: number;
  backoffSeconds: number;
  maxBackoffSeconds: number;
  /** null: any non-zero exit but 126 and 127. */
  exitCodes: readonly number[] | null;
  retryMemoryLimit: boolean;
  retryOnTimeout: boolean;
  /** Seconds a try may run, or null for none. */
  timeoutSeconds: number | null;
  stallSeconds: number | null;
  onStall: 'mark' | 'cancel';
}

/** Exit codes that say the program could not run at all (not found, not executable): never retried. */
const CANNOT_RUN = new Set([126, 127]);

/**
 * The policy of an entry. `poolTimeoutSeconds` is CRON_POOL_<POOL>_RUN_TIMEOUT (0: none); the entry's
 * own `timeoutSeconds` wins. A GitHub sync has a timeout only: its deadline counts working time (a
 * slot held), never hibernation (githubRuns.ts keeps what is left); it is not retried and has no log
 * watchdog (its own stuck-no-progress check ends it).
 */
export function runPolicy(entry: CatalogEntry, poolTimeoutSeconds = 0): RunPolicy {
  const timeout = entry.timeoutSeconds ?? poolTimeoutSeconds;
  if (isGithubSync(entry)) {
    return {
      attempts: 1,
      backoffSeconds: 0,
      maxBackoffSeconds: 0,
      exitCodes: null,
      retryMemoryLimit: false,
      retryOnTimeout: false,
      timeoutSeconds: timeout > 0 ? timeout : null,
      stallSeconds: null,
      onStall: 'mark',
    };
  }
  const backoffSeconds = entry.retry?.backoffSeconds ?? RETRY_DEFAULTS.backoffSeconds;
  return {
    attempts: entry.retry?.attempts ?? 1,
    backoffSeconds,
    maxBackoffSeconds: entry.retry?.maxBackoffSeconds ?? Math.max(backoffSeconds, RETRY_DEFAULTS.maxBackoffSeconds),
    exitCodes: entry.retry?.exitCodes ?? null,
    retryMemoryLimit: entry.retryMemoryLimit === true,
    retryOnTimeout: entry.retryOnTimeout === true,
    timeoutSeconds: timeout > 0 ? timeout : null,
    stallSeconds: entry.stallSeconds ?? null,
    onStall: entry.onStall ?? 'mark',
  };
}

/** How a try ended, as the retry decision sees it. */
export interface TryEnd {
  status: RunStatus;
  reason: RunReason | null;
  exitCode: number | null;
}

/**
 * Whether a try that ended so is tried again (attempts left aside). Never: a cancel by a person, a
 * refusal before the start (a disk-gate or slot wait that timed out, an unsafe lock file…), an exit of
 * 126 or 127, a memory-limit kill unless `retryMemoryLimit`, a timeout unless `retryOnTimeout`. A run
 * the stall watchdog cancelled is retried (its policy asked for both).
 */
export function isRetryable(policy: RunPolicy, end: TryEnd): boolean {
  if (policy.attempts <= 1) return false;
  if (end.status === 'cancelled') return end.reason === 'stalled';
  if (end.status !== 'failed') return false;
  switch (end.reason) {
    case 'timeout':
      return policy.retryOnTimeout;
    case 'memory-limit':
      return policy.retryMemoryLimit;
    case 'signal':
      return policy.exitCodes === null;
    case 'exit-code': {
      if (end.exitCode === null || end.exitCode === 0) return false;
      if (policy.exitCodes !== null) return policy.exitCodes.includes(end.exitCode);
      return !CANNOT_RUN.has(end.exitCode);
    }
    default:
      return false;
  }
}

/**
 * The delay before try `next` (2-based: the first retry is try 2): `min(max, backoff × 2^(next−2))`,
 * with equal jitter: half of it fixed, the other half random, so tries of many runs that failed
 * together spread out while each still waits at least half its delay.
 */
export function retryDelayMs(policy: RunPolicy, next: number, random: () => number = Math.random): number {
  const full = Math.min(policy.maxBackoffSeconds, policy.backoffSeconds * 2 ** Math.max(0, next - 2)) * 1000;
  return full / 2 + random() * (full / 2);
}
