import type { GetHistory, RunSpan } from '../../shared/protocol';
import { historyStore } from '../history/historyRegistry';
import type { AgentControl } from './agentControl';

/** The agent's answer to `quantilica/history`: disk samples from the history store, run spans from the run store. */
export function stationHistory(control: AgentControl, params: GetHistory.Params | null | undefined, now = Date.now()): GetHistory.Result {
  const hours = Math.min(params?.hours ?? 24, 48);
  const fromMs = now - hours * 3600_000;
  const snapshot = control.hub.snapshot();
  const runs: RunSpan[] = control
    .listRuns(1000)
    .filter((r) => r.startedAt !== null && (r.finishedAt === null || Date.parse(r.finishedAt) >= fromMs))
    .map((r) => ({
      runId: r.runId,
      fetcher: r.fetcher,
      pool: r.pool,
      slot: r.slot,
      start: r.startedAt!,
      end: r.finishedAt,
      status: r.status,
      exitCode: r.exitCode,
      reason: r.reason,
    }));
  const disk = snapshot.disk;
  return {
    from: new Date(fromMs).toISOString(),
    to: new Date(now).toISOString(),
    disk: historyStore()?.diskSamples(fromMs) ?? [],
    thresholds: disk ? { warnGb: disk.warnGb, pauseGb: disk.pauseGb, resumeGb: disk.resumeGb } : null,
    pools: snapshot.pools.map((p) => ({ name: p.name, size: p.size })),
    runs,
  };
}
