import * as os from 'node:os';
import {
  PROTOCOL_VERSION,
  SERIAL_POOL,
  type AgentInfo,
  type GetMetrics,
  type ListEvents,
  type PoolState,
  type RunInfo,
  type ScheduleStatus,
} from '../shared/protocol';
import type { Catalog } from './catalog/catalog';
import type { GithubRuns } from './github/githubRuns';
import type { Config } from './config/config';
import { InvalidArgumentError, UnknownRunError } from './errors';
import type { MemoryCeilings } from './memory/memoryCeilings';
import type { RunManager } from './runs/runManager';
import { toRunInfo, type RunStore } from './runs/runStore';
import type { AgentControl, FlushResult } from './server/agentControl';
import { readKernelFlocks } from './flock/procLocks';
import type { PgRunCancel } from './slots/pgRunCancel';
import type { PgSlotBackend } from './slots/pgSlotBackend';
import type { SnapshotParts, StateHub } from './state/stateHub';
import type { PoolStates } from './state/poolStates';
import { runWithUsage } from './state/runWithUsage';
import { otherModeHolders } from './slots/otherModeHolders';
import type { ForeignRuns } from './runs/foreignRuns';

/**
 * What the facade answers from, all made by the composition root (agent/compose/composeCore.ts);
 * the optional ones are absent where the process has no such part (a test's core alone).
 */
export interface OrchestratorParts {
  config: Config;
  hub: StateHub;
  catalog: Catalog;
  runs: RunManager;
  /** Runs of the shared store another process of this user manages (a CLI run started with no agent). */
  foreign: ForeignRuns;
  store: RunStore;
  memory: MemoryCeilings;
  github: GithubRuns;
  /** The shared slot database with QUANTILICA_SLOT_BACKEND=postgres. */
  slotBackend: PgSlotBackend | null;
  /** Cancels of runs held or queued on other stations, and of ours asked by them. */
  remoteCancel: PgRunCancel | null;
  poolStates: PoolStates;
  flush?: (onProgress: (sent: number, remaining: number) => void) => Promise<FlushResult>;
  setSchedulePaused?: (paused: boolean, fetcher?: string) => ScheduleStatus;
  /** The operator events and the metrics (agent/events, agent/metrics). */
  listEvents?: AgentControl['listEvents'];
  metrics?: AgentControl['metrics'];
}

/** Finished runs a snapshot carries besides the active ones: what a client lists before it asks for more. */
const SNAPSHOT_RECENT_RUNS = 50;

/**
 * What the protocol server and an in-process CLI drive: the agent's answers, each read from or
 * handed to the parts it is given. It builds, starts and closes none of them.
 */
export class Orchestrator implements AgentControl {
  readonly hub: StateHub;
  private readonly startedAt = new Date().toISOString();

  constructor(private readonly parts: OrchestratorParts) {
    this.hub = parts.hub;
  }

  /** Queues a run; resolves once it is durably recorded. */
  run(fetcher: string, args: string[], trigger: RunInfo['trigger']): Promise<RunInfo> {
    return this.parts.runs.enqueue(fetcher, args, trigger);
  }

  async waitRun(runId: string): Promise<RunInfo> {
    const { foreign, runs, remoteCancel } = this.parts;
    const stored = foreign.standing(runId);
    if (stored?.active) return foreign.wait(runId);
    // Ended and no longer this process's: the answer the run manager would read again from the store.
    if (stored) return toRunInfo(stored.run);
    try {
      return await runs.waitRun(runId);
    } catch (err) {
      // A run of another station this process asked to cancel: its end is read from its answer.
      const remote = err instanceof UnknownRunError ? await remoteCancel?.waitEnd(runId) : null;
      if (remote) return remote;
      throw err;
    }
  }

  async cancel(target: { runId?: string; fetcher?: string }): Promise<RunInfo[]> {
    const { foreign, runs, remoteCancel } = this.parts;
    if (target.runId) {
      if (foreign.active(target.runId)) return [await foreign.cancel(target.runId)];
      try {
        return [runs.cancel(target.runId)];
      } catch (err) {
        // Not a run of this station: with the postgres backend its owner may be another station.
        if (!(err instanceof UnknownRunError) || !remoteCancel) throw err;
        return [await remoteCancel.request(target.runId)];
      }
    }
    if (target.fetcher) {
      const name = this.parts.catalog.resolve(target.fetcher).name;
      const own = runs
        .activeRuns()
        .filter((r) => r.fetcher === name)
        .map((r) => runs.cancel(r.runId));
      const others = await Promise.all(foreign.activeOf(name).map((r) => foreign.cancel(r.runId)));
      return [...own, ...others];
    }
    throw new InvalidArgumentError('cancel needs a run id or a fetcher name');
  }

  listRuns(limit: number): RunInfo[] {
    const active = this.parts.runs.activeRuns().map((r) => runWithUsage(r, this.parts.memory));
    const ids = new Set(active.map((r) => r.runId));
    const recent = this.parts.store
      .recent(limit)
      .filter((r) => !ids.has(r.runId))
      .map(toRunInfo);
    return [...active, ...recent].slice(0, limit);
  }

  async tailLog(runId: string, maxBytes: number): Promise<{ path: string; text: string; truncated: boolean }> {
    const { runs } = this.parts;
    const run = runs.get(runId);
    if (!run) throw new InvalidArgumentError(`no run ${runId}`);
    if (!run.logPath) throw new InvalidArgumentError(`run ${runId} has no log yet (status ${run.status})`);
    return Promise.resolve({ path: run.logPath, ...runs.tailLog(runId, maxBytes) });
  }

  flush(onProgress: (sent: number, remaining: number) => void): Promise<FlushResult> {
    if (!this.parts.flush) return Promise.resolve({ sent: 0, remaining: 0, error: 'telemetry flush is not available in this process' });
    return this.parts.flush(onProgress);
  }

  setSchedulePaused(paused: boolean, fetcher?: string): ScheduleStatus {
    if (!this.parts.setSchedulePaused) throw new InvalidArgumentError('the schedule runs only in the agent');
    return this.parts.setSchedulePaused(paused, fetcher);
  }

  listEvents(params: ListEvents.Params, abort: (stop: () => void) => void): Promise<ListEvents.Result> {
    if (!this.parts.listEvents) throw new InvalidArgumentError('operator events are kept only by the agent');
    return this.parts.listEvents(params, abort);
  }

  metrics(): Promise<GetMetrics.Result> {
    if (!this.parts.metrics) throw new InvalidArgumentError('metrics are not available in this process');
    return this.parts.metrics();
  }

  poolStates(): PoolState[] {
    return this.parts.poolStates.all();
  }

  /** Why a run queued now could not get a slot of the shared slot database (null: no such database, or it answers). */
  slotDatabaseError(): string | null {
    const slots = this.parts.slotBackend;
    if (!slots || slots.reachable) return null;
    return slots.status().error ?? 'unknown error';
  }

  agentInfo(): AgentInfo {
    const { config, store, memory, slotBackend } = this.parts;
    const otherMode = otherModeHolders(
      { usePools: config.usePools, lockDir: config.lockDir, poolNames: Object.keys(config.pools) },
      readKernelFlocks(),
      store.active(),
    );
    return {
      pid: process.pid,
      host: os.hostname(),
      startedAt: this.startedAt,
      protocolVersion: PROTOCOL_VERSION,
      mode: config.usePools ? 'pools' : 'serial',
      dataDir: config.dataDir,
      lockDir: config.lockDir,
      memory: memory.enforcement(),
      ...(slotBackend ? { slotBackend: slotBackend.status() } : {}),
      ...(otherMode ? { otherMode } : {}),
    };
  }

  /** The core's part of a snapshot; the disk gate, the spool and the schedule add theirs. */
  coreState(): Omit<SnapshotParts, 'disk' | 'spool' | 'schedule'> {
    const { config, catalog, runs, store, memory, github } = this.parts;
    const active = runs.activeRuns().map((r) => runWithUsage(r, memory));
    const ids = new Set(active.map((r) => r.runId));
    return {
      agent: this.agentInfo(),
      catalog: catalog.entries.map((e) => ({
        name: e.name,
        kind: e.kind ?? 'fetcher',
        pool: config.usePools ? e.pool : SERIAL_POOL,
        aliases: e.aliases ?? [],
        demo: e.demo,
      })),
      pools: this.poolStates(),
      runs: [
        ...active,
        ...store
          .recent(SNAPSHOT_RECENT_RUNS)
          .filter((r) => !ids.has(r.runId))
          .map(toRunInfo),
      ],
      sync: github.info(),
    };
  }
}
