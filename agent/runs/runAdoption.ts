import * as path from 'node:path';
import { isGithubSync } from '../catalog/catalog';
import { PrivateFlock } from '../telemetry/privateFlock';
import { groupOf, newActiveRun } from './activeRun';
import { cancelRequested } from './runGuards';
import type { RunCore } from './runCore';
import { openRunLog } from './runLogFile';
import type { RunStart, StageLimit } from './runStart';
import type { StoredRun } from './runStore';
import { transition } from './runTransitions';

/** In the home (QUANTILICA_HOME), beside the spool: taken by whoever takes over runs left behind. */
const ADOPTION_LOCK = 'adoption.lock';
/** Far beyond a takeover's few commits; a holder that dies frees the lock at once. */
const ADOPTION_WAIT_MS = 10_000;

/**
 * The runs a process that is gone left behind, taken over at start: a run that was `running` is
 * adopted if its group still lives, or finished from the wrapper's status file; a run recorded as
 * `starting` (the spawn was recorded, its pid was not) is found by its id in /proc or by its status
 * file; a run that had not reached its spawn fails with `owner-exited-while-waiting`; a run an agent
 * left queued is the next agent's, in its order.
 */
export class RunAdoption {
  /** This process's takeovers, one after another: the lock below is per descriptor, not per process. */
  private turn: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly core: RunCore,
    private readonly starter: RunStart,
  ) {}

  adoptLeftovers(): Promise<void> {
    return this.inTurn(() => this.adoptNow());
  }

  /**
   * A takeover (adopting what a gone process left, cancelling a kept run) under the home's adoption
   * lock, from reading the runs to the commit of their new owner: two processes of one home (the next
   * agent, a CLI following or cancelling a run) finding the same run left behind would both adopt it
   * and both record its end. The second reads the run after the first's commit and sees its owner alive.
   */
  private inTurn<T>(takeover: () => Promise<T>): Promise<T> {
    const run = this.turn.then(async () => {
      const lockPath = path.join(this.core.deps.config.homeDir, ADOPTION_LOCK);
      const lock = await PrivateFlock.acquire(lockPath, ADOPTION_WAIT_MS);
      if (lock === null)
        throw new Error(
          `another quantilica process of this home has held ${lockPath} for ${ADOPTION_WAIT_MS / 1000} s while taking over runs; try again`,
        );
      try {
        return await takeover();
      } finally {
        lock.release();
      }
    });
    this.turn = run.catch(() => undefined);
    return run;
  }

  private async adoptNow(): Promise<void> {
    const { deps, active } = this.core;
    const moves: Array<Promise<void>> = [];
    for (const stored of deps.journal.active()) {
      if (active.has(stored.runId) || deps.spawner.ownerAlive(stored)) continue;
      if (isKeptInQueue(stored)) {
        // Waiting runs an agent left are the next agent's, in their order: a CLI leaves them be.
        if (deps.self.role === 'agent') this.resumeWaiting(stored);
        continue;
      }
      moves.push(this.adopt(stored));
    }
    await Promise.all(moves);
  }

  /**
   * Cancels a waiting run an agent left while no agent runs (a CLI working in-process): it ends
   * `cancelled` here, never started. Null when the run is not such a run.
   */
  cancelKept(runId: string): Promise<StoredRun | null> {
    return this.inTurn(() => this.cancelKeptNow(runId));
  }

  private async cancelKeptNow(runId: string): Promise<StoredRun | null> {
    const { deps, active } = this.core;
    const stored = deps.journal.get(runId);
    if (!stored || !isKeptInQueue(stored) || active.has(runId) || deps.spawner.ownerAlive(stored)) return null;
    const entry = this.core.entryOf(stored);
    const state = newActiveRun({ ...stored }, entry, this.core.policyOf(entry, stored.pool));
    active.set(runId, state);
    void deps.journal.record({ runId, event: 'cancel-requested', task: stored.fetcher, pool: stored.pool, payload: {} });
    await this.core.finish(state, 'cancelled', 'cancelled', { exitCode: stored.exitCode, signal: stored.signal });
    return state.run;
  }

  private async adopt(stored: StoredRun): Promise<void> {
    const { deps, ports, active } = this.core;
    const entry = this.core.entryOf(stored);
    const state = newActiveRun({ ...stored }, entry, this.core.policyOf(entry, stored.pool));
    const { run } = state;
    const own = {
      ownerPid: deps.self.pid,
      ownerStartTime: deps.self.startTime,
      ...(deps.self.role === 'agent' ? { ownerRole: 'agent' as const } : {}),
    };
    if (isGithubSync(entry) && (run.status === 'running' || run.reason === 'hibernating')) {
      // A sync left by a dead agent: its next leg (now, or at its wake-up time) is this agent's.
      if (!deps.github?.adopts) return;
      active.set(run.runId, state);
      await transition(ports, run, run.status === 'running' ? 'adopt' : 'adoptHibernating', { ...own, slot: null });
      deps.github.adopt(state, this.core.moves);
      return;
    }
    active.set(run.runId, state);
    if (run.status === 'waiting') {
      const group = run.reason === 'starting' ? deps.spawner.findGroup(run.runId) : null;
      const recorded = run.reason === 'starting' && run.statusFile ? deps.spawner.readStatus(run.statusFile) : null;
      if (group === null && (recorded === null || recorded.unknown)) {
        await this.core.finish(state, 'failed', 'owner-exited-while-waiting', { exitCode: null, signal: null });
        return;
      }
      // The spawn happened before the agent died: the run did start.
      await transition(ports, run, 'start', {
        ...own,
        reason: null,
        wait: null,
        pid: group?.pgid ?? null,
        startTime: group?.startTime ?? null,
        startedAt: run.startedAt ?? deps.clock.now().toISOString(),
      });
    } else {
      await transition(ports, run, 'adopt', own);
    }
    deps.logger.info({ runId: run.runId, fetcher: run.fetcher, pid: run.pid }, 'adopted a run left by a previous agent');
    deps.memory?.track(run.runId, run.pool, groupOf(run)); // memory ceilings
    this.core.upkeep.follow(state, null, this.adoptedLog(run));
    // A cancel the previous agent began: its SIGKILL timer died with it, and its SIGTERM may not have
    // gone out before it stopped. TERM again, and KILL after the grace, as for a deadline.
    if (cancelRequested(state)) this.core.upkeep.terminate(state);
  }

  /** The log of an adopted run, opened once and checked (never through a link); null: not capped. */
  private adoptedLog(run: StoredRun): number | null {
    if (!run.logPath) return null;
    try {
      return openRunLog(run.logPath, true);
    } catch (err) {
      this.core.deps.logger.warn(
        { runId: run.runId, logPath: run.logPath, err: (err as Error).message },
        'the log of an adopted run is not capped',
      );
      return null;
    }
  }

  /**
   * A run an agent left waiting (queued, at the disk gate, in its retry backoff): taken over as it was,
   * with its enqueue time, trigger and attempt, and queued again now (the caller goes in the store's
   * order, so the queue keeps its order). A wait whose limit passed while no agent ran ends it.
   */
  private resumeWaiting(stored: StoredRun): void {
    const { deps, ports, active } = this.core;
    const entry = this.core.entryOf(stored);
    const state = newActiveRun({ ...stored }, entry, this.core.policyOf(entry, stored.pool));
    const { run } = state;
    active.set(run.runId, state);
    const own = { ownerPid: deps.self.pid, ownerStartTime: deps.self.startTime, ownerRole: 'agent' as const };
    deps.logger.info({ runId: run.runId, fetcher: run.fetcher, wait: run.wait }, 'resumed a run a previous agent left waiting');
    if (run.reason === 'retry-backoff') {
      const recorded = transition(ports, run, 'resume', own);
      state.driving = recorded.then(() => this.starter.backoff(state));
      return;
    }
    const limit = this.waitLimit(run);
    if (limit !== null && limit.leftMs <= 0) {
      state.driving = this.core.finish(
        state,
        'failed',
        limit.reason,
        { exitCode: null, signal: null },
        { message: `the run's wait limit (${limit.seconds} s) passed while no agent ran` },
      );
      return;
    }
    state.driving = this.starter.drive(state, transition(ports, run, 'resume', own), limit ?? undefined);
  }

  /** What is left of a waiting run's present wait, by the limit of the kind of wait it is in. */
  private waitLimit(run: StoredRun): StageLimit | null {
    const { deps } = this.core;
    const since = run.waitSince ? Date.parse(run.waitSince) : NaN;
    if (!Number.isFinite(since) || run.wait === null) return null;
    const elapsed = deps.clock.now().getTime() - since;
    if (run.wait.kind === 'pool') {
      const seconds = deps.pools.get(run.pool)?.waitTimeoutSeconds;
      return seconds === undefined ? null : { stage: 'pool', seconds, leftMs: seconds * 1000 - elapsed, reason: 'wait-timeout' };
    }
    if (run.wait.kind === 'disk' || run.wait.kind === 'admission') {
      const seconds = deps.diskMaxWaitSeconds;
      return seconds === undefined
        ? null
        : { stage: 'gate', seconds, leftMs: seconds * 1000 - elapsed, reason: 'disk-backpressure-timeout' };
    }
    return null;
  }
}

/** A waiting run an agent left, which the next agent resumes (a run at its spawn is adopted instead). */
function isKeptInQueue(run: StoredRun): boolean {
  return run.status === 'waiting' && run.ownerRole === 'agent' && run.reason !== 'starting' && run.reason !== 'hibernating';
}
