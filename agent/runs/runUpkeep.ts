import * as fs from 'node:fs';
import type { Logger } from '../log/logger';
import type { RunMemory } from '../memory/runMemory';
import type { NewTelemetryEvent } from '../telemetry/telemetrySink';
import { groupOf, type ActiveRun } from './activeRun';
import { LATE_CANCEL_POLL_MS, LateCancel } from './lateCancel';
import { LogCapper } from './logCap';
import { note } from './runTransitions';
import type { ExitInfo } from './runProcess';
import type { RunSpawner } from './runPorts';

export interface RunUpkeepDeps {
  spawner: RunSpawner;
  logger: Logger;
  heartbeatSeconds: number;
  graceSeconds: number;
  logCapBytes: number;
  /** The shell wrapper's path: a fetcher it starts after a cancel's SIGTERM gets its own (lateCancel.ts). */
  wrapperPath?: string;
  /** memory ceilings: the run's cgroup (signalled with its group) and its figures on each heartbeat. */
  memory?: RunMemory;
  /** Publishes a run whose figures changed (clients see its memory while it runs). */
  publish?(state: ActiveRun): void;
  /** Records a heartbeat (in order with the run's moves). */
  record(event: NewTelemetryEvent): void;
  /** The wrapper ended but processes of the run live on (they hold the slot). */
  onLingering(state: ActiveRun, pids: number[]): void;
  /** No process of the run is left: its exit. */
  onEnded(state: ActiveRun, exit: ExitInfo): void;
  /** The try passed its deadline (RunInfo.deadline). */
  onDeadline(state: ActiveRun): void;
  /** The log has not grown for the policy's stallSeconds (true), or grew again after that (false). */
  onStall(state: ActiveRun, stalled: boolean): void;
}

/** The most often the stall watchdog looks at a log: a stat per run per second costs next to nothing. */
const STALL_CHECK_MS = 1000;

/**
 * The side concerns of a running run, kept out of the run manager: its heartbeat, its log cap, the
 * watch that follows its process group to the end (also of a run adopted from an earlier agent), the
 * TERM-then-KILL of a cancel, the try's deadline and the stall watchdog (the log's growth). Everything
 * here runs on a timer that `stop` ends with the run.
 */
export class RunUpkeep {
  private readonly logCapper: LogCapper;
  /** Per cancelled run: the look for a fetcher its wrapper starts after the SIGTERM (lateCancel.ts). */
  private readonly lateCancels = new Map<ActiveRun, NodeJS.Timeout>();

  constructor(private readonly deps: RunUpkeepDeps) {
    this.logCapper = new LogCapper(deps.logCapBytes);
  }

  /**
   * Starts following a running run; `exited` is the wrapper's exit when this process spawned it, and
   * `logFd` the descriptor of its log (owned from here on: capped through it, closed at `stop`).
   */
  follow(state: ActiveRun, exited: Promise<ExitInfo | null> | null, logFd: number | null): void {
    const { run } = state;
    if (run.logPath && logFd !== null) this.logCapper.watch(run.logPath, logFd);
    state.heartbeat = setInterval(() => this.beat(state), this.deps.heartbeatSeconds * 1000);
    state.heartbeat.unref();
    const watch = this.deps.spawner.watch(groupOf(run), run.statusFile ?? '', exited, (pids) => {
      state.lingering = pids;
      this.deps.onLingering(state, pids);
    });
    state.watch = watch;
    void watch.ended.then((exit) => this.deps.onEnded(state, exit));
    this.watchPolicy(state);
  }

  /** The deadline's timer (an adopted run's too, from its recorded deadline) and the stall watchdog. */
  private watchPolicy(state: ActiveRun): void {
    const { run, policy } = state;
    if (run.deadline) {
      state.deadlineTimer = setTimeout(
        () => {
          state.deadlineTimer = null;
          this.deps.onDeadline(state);
        },
        Math.max(0, Date.parse(run.deadline) - Date.now()),
      );
      state.deadlineTimer.unref();
    }
    if (policy.stallSeconds !== null) {
      // The log's size is read only for the stall watchdog, its one reader.
      state.logSize = logSize(run.logPath);
      state.stallTimer = setInterval(() => this.checkLog(state), Math.min(STALL_CHECK_MS, policy.stallSeconds * 250));
      state.stallTimer.unref();
    }
  }

  /** Notes the log's growth (RunInfo.logGrewAt) and tells when it stalls or grows again. */
  private checkLog(state: ActiveRun): void {
    const { run, policy } = state;
    const size = logSize(run.logPath);
    const now = Date.now();
    if (size !== state.logSize) {
      state.logSize = size;
      note(run, 'logGrew', { logGrewAt: new Date(now).toISOString() });
      if (run.stalledSince) this.deps.onStall(state, false);
      return;
    }
    const grewAt = Date.parse(run.logGrewAt ?? run.startedAt ?? '') || now;
    if (policy.stallSeconds !== null && !run.stalledSince && now - grewAt >= policy.stallSeconds * 1000) this.deps.onStall(state, true);
  }

  /**
   * SIGTERM to the run's group now, SIGKILL after the grace period. Each signal goes only to a group
   * that is still provably the run's (runGroup.ts), and the SIGKILL timer is the run's: `stop` clears
   * it, so it can never hit a later process that was given the same number as its group.
   */
  terminate(state: ActiveRun): void {
    const group = groupOf(state.run);
    // Listed before the signal: a member that execs its fetcher in between gets a second SIGTERM
    // rather than none.
    const late = this.deps.wrapperPath ? new LateCancel(this.deps.wrapperPath, this.deps.spawner.members(group)) : null;
    this.deps.spawner.signal(group, 'SIGTERM');
    if (late) this.followLateCancel(state, late);
    // memory ceilings: the run's cgroup also holds processes that left its group (setsid).
    this.deps.memory?.signal(state.run.runId, 'SIGTERM');
    if (state.grace) clearTimeout(state.grace);
    state.grace = setTimeout(() => {
      state.grace = null;
      const killedGroup = this.deps.spawner.signal(group, 'SIGKILL');
      const killedCgroup = this.deps.memory?.signal(state.run.runId, 'SIGKILL') ?? false; // memory ceilings
      if (killedGroup || killedCgroup) {
        this.deps.logger.warn({ runId: state.run.runId, pgid: group.pgid }, 'fetcher group outlived the cancel grace period; sent SIGKILL');
      }
    }, this.deps.graceSeconds * 1000);
    state.grace.unref();
  }

  /** Until the group ends, its wrappers are gone or the grace ends: a late fetcher gets the SIGTERM too. */
  private followLateCancel(state: ActiveRun, late: LateCancel): void {
    this.stopLateCancel(state);
    const timer = setInterval(() => {
      const members = this.deps.spawner.members(groupOf(state.run));
      const sent = late.deliver(members);
      if (sent > 0)
        this.deps.logger.info({ runId: state.run.runId, sent }, "the fetcher started after the cancel's SIGTERM; sent it its own");
      if (members.length === 0 || !late.wrappersLeft(members) || state.grace === null) this.stopLateCancel(state);
    }, LATE_CANCEL_POLL_MS);
    timer.unref();
    this.lateCancels.set(state, timer);
  }

  private stopLateCancel(state: ActiveRun): void {
    const timer = this.lateCancels.get(state);
    if (timer) clearInterval(timer);
    this.lateCancels.delete(state);
  }

  /** Ends everything that runs on a timer for the run: heartbeat, grace SIGKILL, group watch, log cap. */
  stop(state: ActiveRun): void {
    this.stopLateCancel(state);
    if (state.heartbeat) clearInterval(state.heartbeat);
    state.heartbeat = null;
    if (state.deadlineTimer) clearTimeout(state.deadlineTimer);
    state.deadlineTimer = null;
    if (state.stallTimer) clearInterval(state.stallTimer);
    state.stallTimer = null;
    if (state.grace) clearTimeout(state.grace);
    state.grace = null;
    state.watch?.stop();
    if (state.run.logPath) this.logCapper.unwatch(state.run.logPath);
  }

  /** The descriptor of a running run's log, to read it without its name; null when none is held. */
  logFdOf(state: ActiveRun): number | null {
    return state.run.logPath ? this.logCapper.fdOf(state.run.logPath) : null;
  }

  close(): void {
    for (const timer of this.lateCancels.values()) clearInterval(timer);
    this.lateCancels.clear();
    this.logCapper.close();
  }

  private beat(state: ActiveRun): void {
    const { run } = state;
    if (state.lingering.length > 0) state.lingering = this.deps.spawner.members(groupOf(run));
    // The heartbeat says when the log last grew, not only that the run is alive (the watchdog's clock).
    if (state.stallTimer === null) this.checkLog(state);
    // memory ceilings: the run's memory and CPU so far ride on each heartbeat, and clients see them.
    const usage = this.deps.memory?.usage(run.runId);
    const payload = {
      ...(state.lingering.length > 0 ? { pid: run.pid, lingering: state.lingering } : { pid: run.pid }),
      logGrewAt: run.logGrewAt ?? null,
      attempt: run.attempt ?? 1,
      ...usage,
    };
    this.deps.record({ runId: run.runId, event: 'heartbeat', task: run.fetcher, pool: run.pool, payload });
    if (usage) this.deps.publish?.(state);
  }
}

function logSize(file: string | null): number {
  if (file === null) return -1;
  try {
    return fs.statSync(file).size;
  } catch {
    return -1;
  }
}
