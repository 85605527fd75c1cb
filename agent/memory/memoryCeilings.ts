import type { MemoryEnforcement, PoolMemory } from '../../shared/protocol';
import type { Logger } from '../log/logger';
import type { RunGroup } from '../process/runGroup';
import { CgroupLayout, fromWaiter, type CgroupDirs, type CgroupFigures, type WaiterFigures } from './cgroupLayout';
import { detectCgroups, type CgroupSupport } from './cgroupSupport';
import { defaultCgroupName } from './defaultCgroupName';
import { GroupSampler } from './groupSampler';
import { memoryBudgetWarning } from './memoryBudget';
import type { FinalUsage, RunMemory, RunUsage } from './runMemory';

export interface MemoryCeilingsOptions {
  /** Each pool's ceiling in MB. */
  pools: ReadonlyMap<string, number>;
  reserveMb: number;
  /** The agent's cgroup folder name; default `quantilica-<uid>-<hash of the home>` (defaultCgroupName.ts). */
  cgroupName: string | null;
  /** QUANTILICA_HOME: the default cgroup name is derived from it. */
  homeDir: string;
  /** How old an empty run cgroup of no known run must be before it is removed (FRESH_SECONDS). */
  freshSeconds?: number;
  logger: Logger;
  /** How often runs without a cgroup are sampled (besides at each heartbeat). */
  sampleMs?: number;
  /** Instead of detecting: what to use (`not-enforced` when QUANTILICA_MEMORY_ENFORCE=false). */
  support?: CgroupSupport;
  /**
   * Whether the spawner that starts the runs now makes a v1 run's folders itself before its fetcher
   * joins them (the native spawner's waiter: cgroup_begin in quantilica-spawner.c). Asked per run.
   */
  spawnerMakesRunFolders?: () => boolean;
}

/**
 * An empty run cgroup younger than this may be one another process (a CLI run sharing the station)
 * just made for a run it is starting: its wrapper has not joined yet. It is left for a later sweep.
 */
const FRESH_SECONDS = 60;

interface Tracked {
  pool: string;
  limitMb: number | null;
  dirs: CgroupDirs | null;
  sampler: GroupSampler | null;
  /** The end figures the native spawner's waiter read before it removed the run's cgroup. */
  ended?: CgroupFigures;
  /** Prepared by this agent and never killed: no freezer folder was made for it (CgroupLayout.kill). */
  noFreezer?: boolean;
}

/**
 * Memory ceilings per pool and per run, through cgroups: `<base>/<pool>` carries the
 * pool's ceiling, `<base>/<pool>/<runId>` the run's (the catalog's memoryMb) and holds every process
 * of the run, which its wrapper moves there before the fetcher executes. Without usable cgroups the
 * runs go on unlimited, sampled from /proc, and `enforcement()` says why, never silently.
 */
export class MemoryCeilings implements RunMemory {
  readonly support: CgroupSupport;
  private readonly layout: CgroupLayout | null;
  private readonly runs = new Map<string, Tracked>();
  /** Runs whose folders a release could not remove (a process was left): a later try finds them. */
  private readonly leftBehind = new Set<string>();
  private readonly budgetWarning: string | null;
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly opts: MemoryCeilingsOptions) {
    const name = opts.cgroupName ?? defaultCgroupName(opts.homeDir);
    let support = opts.support ?? detectCgroups(name);
    let layout: CgroupLayout | null = null;
    if (support.kind !== 'not-enforced') {
      layout = new CgroupLayout(support);
      try {
        for (const [pool, ceilingMb] of opts.pools) layout.make(layout.dirsOf(pool), ceilingMb, true);
      } catch (err) {
        support = { kind: 'not-enforced', reason: `cgroup-pool-setup-failed` };
        opts.logger.error({ err: (err as Error).message }, "could not set up the pools' cgroups");
        layout = null;
      }
    }
    this.support = support;
    this.layout = layout;
    this.budgetWarning = memoryBudgetWarning([...opts.pools.values()], opts.reserveMb);
  }

  /**
   * Says how memory is limited here, and warns when the budget overcommits the machine. The agent
   * says it once, at start; a CLI call does not (a cron line would mail it on every call): `status`
   * shows it to whoever asks.
   */
  logEnforcement(logger: Logger): void {
    const support = this.support;
    if (this.budgetWarning) logger.warn({ reserveMb: this.opts.reserveMb }, `MEMORY BUDGET: ${this.budgetWarning}`);
    if (support.kind === 'not-enforced') {
      logger.warn(
        { reason: support.reason },
        `MEMORY CEILINGS ARE NOT ENFORCED (${support.reason}): runs are not limited; their memory is sampled from /proc`,
      );
    } else {
      logger.info({ kind: support.kind, base: support.base }, 'memory ceilings enforced by cgroups');
    }
  }

  enforcement(): MemoryEnforcement {
    return {
      kind: this.support.kind,
      reason: this.support.kind === 'not-enforced' ? this.support.reason : null,
      budgetWarning: this.budgetWarning,
    };
  }

  poolMemory(pool: string): PoolMemory | undefined {
    const ceilingMb = this.opts.pools.get(pool);
    if (ceilingMb === undefined) return undefined;
    let usedMb: number | null;
    if (this.layout) usedMb = this.layout.currentMb(this.layout.dirsOf(pool));
    else {
      usedMb = 0;
      for (const t of this.runs.values()) if (t.pool === pool && t.sampler) usedMb += t.sampler.currentMb;
      usedMb = Math.round(usedMb * 10) / 10;
    }
    return { usedMb, ceilingMb, enforcement: this.support.kind };
  }

  async prepare(runId: string, pool: string, memoryMb: number | undefined): Promise<Record<string, string>> {
    const poolMb = this.opts.pools.get(pool) ?? null;
    const limitMb = memoryMb !== undefined && (poolMb === null || memoryMb < poolMb) ? memoryMb : poolMb;
    // A cgroup of this run the agent knows already: an earlier agent's, taken over at start (adoptLeftovers).
    const adopted = (this.runs.get(runId)?.dirs ?? null) !== null;
    const tracked: Tracked = { pool, limitMb, dirs: null, sampler: null, noFreezer: !adopted };
    this.runs.set(runId, tracked);
    if (!this.layout) return {};
    const dirs = this.layout.dirsOf(pool, runId);
    if (!this.leftToSpawner(runId, adopted, memoryMb) && !(await this.makeHere(this.layout, runId, tracked, dirs, memoryMb))) return {};
    tracked.dirs = dirs;
    return { QUANTILICA_CGROUP_PROCS: this.layout.procsFiles(dirs) };
  }

  /** Makes the run's folders on this thread; false when the run goes on without them, or was released meanwhile. */
  private async makeHere(
    layout: CgroupLayout,
    runId: string,
    tracked: Tracked,
    dirs: CgroupDirs,
    memoryMb: number | undefined,
  ): Promise<boolean> {
    try {
      try {
        await layout.makeRun(dirs, memoryMb ?? null);
      } catch (err) {
        // The pool's folder was removed under us (another process of this home closed when it
        // looked unused, see close): made again, with its ceiling, and the base first if need be.
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
        layout.make(layout.dirsOf(), null, true);
        layout.make(layout.dirsOf(tracked.pool), this.opts.pools.get(tracked.pool) ?? null, true);
        await layout.makeRun(dirs, memoryMb ?? null);
      }
    } catch (err) {
      layout.remove(dirs);
      this.opts.logger.error(
        { runId, pool: tracked.pool, err: (err as Error).message },
        "could not make the run's cgroup: the run goes on WITHOUT its memory ceiling (sampled)",
      );
      return false;
    }
    if (this.runs.get(runId) !== tracked) {
      // Released (cancelled, the agent closing) while its folders were being made: none is left behind.
      layout.remove(dirs);
      return false;
    }
    return true;
  }

  /**
   * A v1 run without a ceiling of its own, whose spawner makes folders: a new v1 cgroup starts without
   * a ceiling, so nothing has to be written before the fetcher joins, and its two mkdirs leave the
   * agent's main thread (each waits for cgroup_mutex, which every ending run's rmdir takes too). A
   * folder there already (an earlier agent's, or an earlier try's that kept a process) is the agent's
   * to reset, as before. Told from what this agent knows, not from the cgroup file system: a lookup
   * there waits for the lock the waiters' mkdirs and rmdirs hold.
   */
  private leftToSpawner(runId: string, adopted: boolean, memoryMb: number | undefined): boolean {
    return (
      memoryMb === undefined &&
      this.support.kind === 'cgroup-v1' &&
      !adopted &&
      !this.leftBehind.has(runId) &&
      this.opts.spawnerMakesRunFolders?.() === true
    );
  }

  track(runId: string, pool: string, group: RunGroup): void {
    let tracked = this.runs.get(runId);
    if (!tracked) {
      tracked = { pool, limitMb: this.opts.pools.get(pool) ?? null, dirs: null, sampler: null };
      this.runs.set(runId, tracked);
    }
    if (tracked.dirs) return;
    tracked.sampler = new GroupSampler(group);
    tracked.sampler.sample();
    this.timer ??= setInterval(() => this.sampleAll(), this.opts.sampleMs ?? 1000);
    this.timer.unref();
  }

  usage(runId: string): RunUsage | null {
    const t = this.runs.get(runId);
    if (!t) return null;
    if (t.dirs && this.layout) {
      const f = this.layout.usage(t.dirs);
      return {
        memoryMb: f.currentMb,
        peakMemoryMb: f.peakMb,
        cpuSeconds: round(f.cpuSeconds),
        memoryLimitMb: t.limitMb,
        memorySource: 'cgroup',
      };
    }
    if (!t.sampler) return null;
    t.sampler.sample();
    return {
      memoryMb: t.sampler.currentMb,
      peakMemoryMb: t.sampler.peakMb,
      cpuSeconds: round(t.sampler.cpuSeconds),
      memoryLimitMb: t.limitMb,
      memorySource: 'sampled',
    };
  }

  signal(runId: string, signal: NodeJS.Signals): boolean {
    const t = this.runs.get(runId);
    if (!t?.dirs || !this.layout) return false;
    if (signal === 'SIGKILL') t.noFreezer = false;
    return (signal === 'SIGKILL' ? this.layout.kill(t.dirs) : this.layout.signal(t.dirs, signal)) > 0;
  }

  ended(runId: string, pool: string, figures: WaiterFigures): void {
    const t = this.runs.get(runId);
    if (t) t.ended = fromWaiter(figures);
    // Adopted after the waiter removed the cgroup (the agent before died in between): the figures alone.
    else this.runs.set(runId, { pool, limitMb: this.opts.pools.get(pool) ?? null, dirs: null, sampler: null, ended: fromWaiter(figures) });
  }

  release(runId: string): FinalUsage | null {
    const t = this.runs.get(runId);
    if (!t) return null;
    this.runs.delete(runId);
    if (this.runs.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = null;
    }
    const layout = t.dirs ? this.layout : null;
    let f = t.ended ?? null;
    if (layout && t.dirs) {
      // Unless the waiter found no process left in the cgroup and read and removed it already.
      if (f === null) {
        // Processes still in the run's cgroup left its process group (setsid) and outlived the run.
        t.noFreezer = false;
        const escaped = layout.kill(t.dirs);
        if (escaped > 0)
          this.opts.logger.warn({ runId, killed: escaped }, 'killed processes of an ended run that had left its process group');
        f = layout.endFigures(t.dirs);
      }
      if (layout.remove(t.dirs, t.ended !== undefined, t.noFreezer !== true)) this.leftBehind.delete(runId);
      else {
        this.leftBehind.add(runId);
        this.opts.logger.warn({ runId, cgroup: t.dirs.memory }, "could not remove the run's cgroup; the next agent removes it");
      }
    }
    if (f)
      return {
        memoryMb: null,
        peakMemoryMb: f.peakMb,
        cpuSeconds: round(f.cpuSeconds),
        memoryLimitMb: t.limitMb,
        memorySource: 'cgroup',
        oomKilled: f.oomKills > 0,
        oomKills: f.oomKills,
      };
    if (!t.sampler) return null;
    t.sampler.sample();
    return {
      memoryMb: null,
      peakMemoryMb: t.sampler.peakMb,
      cpuSeconds: round(t.sampler.cpuSeconds),
      memoryLimitMb: t.limitMb,
      memorySource: 'sampled',
      oomKilled: false,
      oomKills: null,
    };
  }

  /**
   * At start, before the run manager adopts runs: run cgroups an earlier agent left are taken over
   * when their run is still known as active (its figures are read at its end, also when it ended
   * while no agent watched), and removed when empty and of no active run.
   */
  adoptLeftovers(isActiveRun: (runId: string) => boolean): void {
    const layout = this.layout;
    if (!layout) return;
    for (const pool of this.opts.pools.keys()) {
      for (const runId of layout.runsOf(pool)) {
        if (this.runs.has(runId)) continue;
        const dirs = layout.dirsOf(pool, runId);
        if (isActiveRun(runId)) {
          this.runs.set(runId, { pool, limitMb: layout.limitMb(dirs) ?? this.opts.pools.get(pool) ?? null, dirs, sampler: null });
          this.opts.logger.info({ runId, pool, cgroup: dirs.memory }, 'adopted the cgroup of a run left by a previous agent');
        } else if (layout.procs(dirs).length === 0 && layout.ageSeconds(dirs) >= (this.opts.freshSeconds ?? FRESH_SECONDS)) {
          if (layout.remove(dirs))
            this.opts.logger.info(
              { runId, pool, cgroup: dirs.memory },
              `removed the empty cgroup ${dirs.memory} of a run no process of this home knows`,
            );
        } else if (layout.procs(dirs).length > 0) {
          this.opts.logger.warn({ runId, pool, cgroup: dirs.memory }, 'a cgroup of an unknown run still has processes; left alone');
        }
      }
    }
  }

  /**
   * Stops sampling and removes the pools' folders and the base when no run cgroup is left in them
   * (rmdir refuses a cgroup with children or tasks, so a run that lives on keeps its pool's): each
   * home has its own base, and empty ones must not pile up on the station.
   */
  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    const layout = this.layout;
    if (!layout || this.runs.size > 0) return;
    let empty = true;
    for (const pool of this.opts.pools.keys()) {
      if (layout.runsOf(pool).length > 0 || !layout.remove(layout.dirsOf(pool))) empty = false;
    }
    if (empty) layout.remove(layout.dirsOf());
  }

  private sampleAll(): void {
    for (const t of this.runs.values()) t.sampler?.sample();
  }
}

function round(n: number | null): number | null {
  return n === null ? null : Math.round(n * 1000) / 1000;
}
