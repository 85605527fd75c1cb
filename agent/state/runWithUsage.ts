import type { RunInfo } from '../../shared/protocol';

/** A running run with its memory and CPU as of now (from the memory ceilings' sampling). */
export function runWithUsage(run: RunInfo, memory: { usage(runId: string): Partial<RunInfo> | null | undefined }): RunInfo {
  if (run.status !== 'running') return run;
  const usage = memory.usage(run.runId);
  return usage ? { ...run, ...usage } : run;
}
