import { ExitCode } from '../exitCodes';

/**
 * The exit code of `quantilica run` for a run that ended: 0 when it completed (82 when a GitHub sync
 * completed with repositories not reached), 80 cancelled, 75 a wait that timed out, else the
 * fetcher's own code, else 81 (refused before it could run).
 */
export function runExitCode(run: { status: string; exitCode: number | null; reason: string | null }): number {
  if (run.status === 'completed') return run.reason === 'repos-not-reached' ? ExitCode.notReached : ExitCode.ok;
  if (run.status === 'cancelled') return ExitCode.cancelled;
  if (run.reason === 'wait-timeout' || run.reason === 'disk-backpressure-timeout') return ExitCode.waitTimeout;
  if (run.exitCode !== null && run.exitCode !== 0) return run.exitCode;
  return ExitCode.refused;
}
