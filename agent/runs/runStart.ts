import * as fs from 'node:fs';
import * as path from 'node:path';
import { isGithubSync, type FetcherEntry } from '../catalog/catalog';
import { fetcherUmask } from '../config/umask';
import { RunRefusedError } from '../errors';
import { CancelledError, groupOf, ParkedError, sleepUntil, type ActiveRun } from './activeRun';
import { runLogPath } from './agentRunLog';
import { sharedFetcherEnv, type SharedEnv } from './fetcherEnv';
import type { QueuePositions } from './queuePositions';
import type { RunCore } from './runCore';
import type { StoredRun } from './runStore';
import { cancelRequested } from './runGuards';
import { createRunLog, logDirSetting, openMadeLog, openRunLog } from './runLogFile';
import { HeldLogDir, type LogDirLease } from './heldLogDir';
import type { HeldSlot } from './runPorts';
import { note, transition } from './runTransitions';
import type { GateRequest } from './startGate';

/** One stage of a resumed run's wait (the disk gate or the pool) and what is left of its limit. */
export interface StageLimit {
  stage: 'gate' | 'pool';
  seconds: number;
  leftMs: number;
  reason: 'wait-timeout' | 'disk-backpressure-timeout';
}

/**
 * A run's way from `waiting` to `running`: the retry backoff, the disk gate, a pool slot, the
 * spawn's intent made durable, then the spawn (or in-agent work taking the slot).
 */
export class RunStart {
  /**
   * The agent's environment, copied once: spreading `process.env` (an accessor over the C environment)
   * for every run was the costliest part of building a fetcher's environment on the hot path.
   */
  private readonly baseEnv: NodeJS.ProcessEnv = { ...process.env };
  /** Each catalog entry's shared environment, built at its first run (a reloaded catalog has new entries). */
  private readonly sharedEnvs = new WeakMap<FetcherEntry, SharedEnv>();
  /**
   * The setting that names the log folder, for its messages, worked out once for the folders it was
   * worked out for: two path resolutions per run were a few percent of a burst's main thread.
   */
  private logSetting: { logDir: string; dataDir: string; setting: string } | null = null;
  /** The log folder handed to a spawner that makes the runs' logs (see HeldLogDir). */
  private readonly logFolder = new HeldLogDir();

  constructor(
    private readonly core: RunCore,
    private readonly positions: QueuePositions,
  ) {}

  /** The last run's cgroup, made or failed: the next spawn waits for it, so runs spawn in grant order. */
  private lastPrepared: Promise<unknown> = Promise.resolve();

  /** A run's cgroup environment, once every run granted before it has its own (see RunMemory.prepare). */
  private inGrantOrder(prepared: Promise<Record<string, string>>): Promise<Record<string, string>> {
    const inTurn = Promise.all([this.lastPrepared, prepared]).then(([, env]) => env);
    this.lastPrepared = inTurn.catch(() => {});
    return inTurn;
  }

  /** The backoff before a run's next try; then the try queues like a new run (the disk gate, a slot). */
  async backoff(state: ActiveRun): Promise<void> {
    const { wait } = state.run;
    if (wait?.kind !== 'retry') return;
    try {
      await sleepUntil(Date.parse(wait.until), state.abort.signal);
    } catch (err) {
      if (err instanceof ParkedError) return;
      await this.core.finish(state, 'cancelled', err instanceof CancelledError ? err.reason : 'cancelled', {
        exitCode: state.run.exitCode,
        signal: state.run.signal,
      });
      return;
    }
    const recorded = transition(this.core.ports, state.run, 'retryWake', {
      reason: null,
      wait: null,
      attempt: wait.attempt,
      waitSince: this.core.deps.clock.now().toISOString(),
    });
    await this.drive(state, recorded);
  }

  /** Waits at the disk gate and for a slot (a resumed wait under what is left of its limit), then starts the run. */
  async drive(state: ActiveRun, recorded: Promise<void>, resumed?: StageLimit): Promise<void> {
    const { deps, ports } = this.core;
    const { run, entry } = state;
    const request: GateRequest = {
      runId: run.runId,
      fetcher: run.fetcher,
      expectedBytes: !isGithubSync(entry) && entry.expectedSizeMb !== undefined ? entry.expectedSizeMb * 1024 * 1024 : null,
    };
    const pool = deps.pools.get(run.pool);
    let grant: HeldSlot | null = null;
    try {
      if (!pool) throw new RunRefusedError('no-such-pool', `pool ${run.pool} is not configured`);
      await withStageLimit(state.abort.signal, resumed?.stage === 'gate' ? resumed : undefined, (signal) =>
        deps.gate.waitToStart(request, signal, (reason) => this.positions.setWait(state, reason)),
      );
      grant = await withStageLimit(state.abort.signal, resumed?.stage === 'pool' ? resumed : undefined, (signal) =>
        pool.acquire(
          run.runId,
          signal,
          (position) => this.positions.setWait(state, { kind: 'pool', position }),
          (cause) => this.positions.setWait(state, { kind: 'slot-backend', cause }),
        ),
      );
      throwIfCancelled(state);
      if (isGithubSync(entry)) {
        await recorded;
        if (!deps.github) throw new RunRefusedError('github-sync-unavailable', 'GitHub syncs run only in the agent');
        // The agent keeps the slot's descriptor itself while the sync works (githubRuns.ts).
        deps.github.begin(state, grant, this.core.moves);
        deps.gate.runStarted(request);
        return;
      }
      // The intent first, durably: an agent that dies after the spawn leaves a run the next one finds
      // by its id (the spawn's environment) or its status file, never a `waiting` run that ran.
      // Commits keep their order, so this one also waits for the enqueue's; with a free slot both go
      // in one transaction (one fsync before the spawn, not two).
      // Each try has its own status file: a later agent must never read an earlier try's exit.
      const attempt = run.attempt ?? 1;
      const statusFile = path.join(this.core.statusDir(), attempt === 1 ? `${run.runId}.exit` : `${run.runId}.${attempt}.exit`);
      const logPath = runLogPath(deps.config.logDir, run.fetcher, run.runId);
      // The run's cgroup is made before the intent is issued, its folders on this thread (two mkdirs),
      // the intent's fsync on libuv's: the spawn waits for both. A cgroup left by an agent that died in
      // between is empty and named after a run the next agent queues again (memoryCeilings.ts adopts or
      // removes it).
      const cgroupEnv = deps.memory ? this.inGrantOrder(deps.memory.prepare(run.runId, run.pool, entry.memoryMb)) : null;
      await transition(ports, run, 'markStarting', { reason: 'starting', wait: null, slot: grant.index, statusFile, logPath });
      throwIfCancelled(state);
      const env = (await cgroupEnv) ?? {};
      throwIfCancelled(state);
      await this.spawn(state, grant, env);
    } catch (err) {
      if (grant !== null && state.run.pid === null) {
        // Cancelled (or refused) after the grant, before the spawn: the slot goes straight back.
        grant.lock.closeOwnCopy();
        pool?.released();
      }
      if (state.run.status === 'running') {
        // The fetcher runs; only its owner record could not be written. It is still watched and finished.
        deps.logger.error({ err, runId: run.runId }, 'could not write the slot owner record');
        return;
      }
      // The slot, if any, is already given back: the run's end must not release it twice.
      const noSlot = state.run.pid === null;
      if (err instanceof ParkedError) {
        // Kept for the next agent; a run that had its slot already goes back to the queue's head.
        if (state.run.reason === 'starting') {
          // Its cgroup, made with the grant, is not left behind empty.
          deps.memory?.release(run.runId);
          await transition(ports, run, 'park', { reason: null, slot: null, statusFile: null, wait: { kind: 'pool', position: 1 } });
        }
        return;
      }
      if (err instanceof CancelledError)
        await this.core.finish(state, 'cancelled', err.reason, { exitCode: null, signal: null }, { slotGone: noSlot });
      else if (err instanceof RunRefusedError)
        await this.core.finish(state, 'failed', err.reason, { exitCode: null, signal: null }, { message: err.message, slotGone: noSlot });
      else
        await this.core.finish(
          state,
          'failed',
          'start-error',
          { exitCode: null, signal: null },
          { message: (err as Error).message, slotGone: noSlot },
        );
      return;
    }
    deps.gate.runStarted(request);
    // Published again now that the lock file names this run (the status change came before the record).
    deps.onPoolChange(run.pool);
  }

  private sharedEnvOf(entry: FetcherEntry): SharedEnv {
    let shared = this.sharedEnvs.get(entry);
    if (shared === undefined) {
      shared = sharedFetcherEnv(
        {
          base: this.baseEnv,
          entryEnv: entry.env,
          passEnv: entry.passEnv,
          fetcherUmask: fetcherUmask(),
          run: { DATA_DIR: this.core.deps.config.dataDir },
        },
        RUN_OWN,
      );
      this.sharedEnvs.set(entry, shared);
    }
    return shared;
  }

  /**
   * The run's log for its spawn. A later try appends to the log its first try made (checked again on
   * its descriptor, never through a link); only a first try, or a log removed meanwhile, creates it:
   * in the run's own process when the spawner makes logs (`madeBySpawner`, its name; `fd` is then
   * the checked log folder), else here.
   */
  private logFor(run: StoredRun): { fd: number } | { folder: LogDirLease; madeBySpawner: string } {
    const { config, spawner } = this.core.deps;
    const again = (run.attempt ?? 1) > 1 ? openRunLog(run.logPath!, true) : null;
    if (again !== null) return { fd: again };
    const name = path.basename(run.logPath!);
    const setting = this.logDirSetting(config.logDir, config.dataDir);
    if (spawner.makesLogs === true) return { folder: this.logFolder.lend(config.logDir, setting), madeBySpawner: name };
    return { fd: createRunLog(config.logDir, name, setting) };
  }

  /** Closes the log folder's descriptor (once the spawns it was lent to are done). */
  close(): void {
    this.logFolder.close();
  }

  private logDirSetting(logDir: string, dataDir: string): string {
    const known = this.logSetting;
    if (known !== null && known.logDir === logDir && known.dataDir === dataDir) return known.setting;
    this.logSetting = { logDir, dataDir, setting: logDirSetting(logDir, dataDir) };
    return this.logSetting.setting;
  }

  /** The agent's own descriptor on the log the run's process made (cap and tail); gives the folder back. */
  private ownLogDescriptor(folder: LogDirLease, name: string, runId: string): number | null {
    const { config, logger } = this.core.deps;
    try {
      return openMadeLog(folder.fd, config.logDir, name);
    } catch (err) {
      // Only the agent's account writes the folder: this is that account's doing, and the run goes on uncapped.
      logger.warn({ err, runId }, 'the run log its process made cannot be opened: not capped, not followed');
      return null;
    } finally {
      folder.release();
    }
  }

  private async spawn(state: ActiveRun, grant: HeldSlot, cgroupEnv: Record<string, string>): Promise<void> {
    const { deps, ports, upkeep } = this.core;
    const { run, entry } = state;
    if (isGithubSync(entry)) throw new Error('a GitHub sync has no process to start');
    const { config } = deps;
    const log = this.logFor(run);
    const argv = [...entry.argv, ...run.args];
    // The start is the moment the agent spawns it: runs granted in queue order start in that order,
    // however long each spawn takes to report back.
    const startedAt = deps.clock.now();
    let proc;
    try {
      proc = await deps.spawner.spawn({
        wrapperPath: deps.wrapperPath,
        statusFile: run.statusFile!,
        argv,
        cwd: entry.cwd ?? config.dataDir,
        shared: this.sharedEnvOf(entry),
        env: {
          QUANTILICA_RUN_ID: run.runId,
          QUANTILICA_FETCHER: run.fetcher,
          QUANTILICA_POOL: run.pool,
          QUANTILICA_SLOT: String(grant.index),
          ...cgroupEnv,
        },
        ...('fd' in log ? { logFd: log.fd } : { logFd: log.folder.fd, logToMake: { dir: config.logDir, name: log.madeBySpawner } }),
        lockFd: grant.lock.fd,
      });
    } catch (err) {
      if ('fd' in log) fs.closeSync(log.fd);
      else log.folder.release();
      throw err;
    }
    const logFd = 'fd' in log ? log.fd : this.ownLogDescriptor(log.folder, log.madeBySpawner, run.runId);
    // The process exists from here on: it is recorded, watched and, if a cancel came meanwhile, stopped.
    note(run, 'spawned', { pid: proc.pid });
    try {
      // The pool learns the holder's end from its exit, not from /proc at every grant (HeldSlots.prune).
      const holderEnded = proc.exited.then(
        (exit) => exit !== null,
        () => false,
      );
      grant.lock.writeRecord(
        {
          pid: proc.pid,
          startTime: proc.startTime,
          fetcher: run.fetcher,
          runId: run.runId,
          since: deps.clock.now().toISOString(),
          agentPid: deps.self.pid,
        },
        holderEnded,
      );
    } finally {
      grant.lock.closeOwnCopy();
    }
    const now = deps.clock.now();
    const { timeoutSeconds } = state.policy;
    // A later try keeps the run's first start: the run's duration is all of its tries.
    const running = transition(
      ports,
      run,
      'start',
      {
        reason: null,
        startedAt: run.startedAt ?? startedAt.toISOString(),
        pid: proc.pid,
        startTime: proc.startTime,
        exitCode: null,
        signal: null,
        deadline: timeoutSeconds === null ? null : new Date(now.getTime() + timeoutSeconds * 1000).toISOString(),
        logGrewAt: now.toISOString(),
        stalledSince: null,
        // Cancelled while its spawn was on its way: stopped below, and so recorded with its start, for
        // an agent that stops before the run's end.
        ...(cancelRequested(state) ? { cancelAsked: true } : {}),
      },
      { argv, ...(timeoutSeconds === null ? {} : { timeoutSeconds }) },
    );
    deps.memory?.track(run.runId, run.pool, groupOf(run)); // memory ceilings
    upkeep.follow(state, proc.exited, logFd);
    if (cancelRequested(state)) upkeep.terminate(state);
    await running;
  }
}

/** The variables that differ from run to run of one entry: never part of its shared environment. */
const RUN_OWN = new Set(['QUANTILICA_RUN_ID', 'QUANTILICA_FETCHER', 'QUANTILICA_POOL', 'QUANTILICA_SLOT', 'QUANTILICA_CGROUP_PROCS']);

function throwIfCancelled(state: ActiveRun): void {
  if (!state.abort.signal.aborted && !cancelRequested(state)) return;
  const reason: unknown = state.abort.signal.reason;
  throw reason instanceof CancelledError || reason instanceof ParkedError
    ? reason
    : new CancelledError('cancelled', 'cancelled while waiting');
}

/** Runs a wait under the run's signal and, for a resumed wait, what is left of its limit. */
async function withStageLimit<T>(
  signal: AbortSignal,
  limit: StageLimit | undefined,
  wait: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  if (limit === undefined) return wait(signal);
  const bounded = new AbortController();
  const follow = () => bounded.abort(signal.reason);
  signal.addEventListener('abort', follow, { once: true });
  const timer = setTimeout(
    () => bounded.abort(new RunRefusedError(limit.reason, `the run's wait limit (${limit.seconds} s) passed`)),
    Math.max(0, limit.leftMs),
  );
  try {
    return await wait(bounded.signal);
  } finally {
    clearTimeout(timer);
    signal.removeEventListener('abort', follow);
  }
}
