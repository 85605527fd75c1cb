import { RUN_REASONS, type GithubSyncInfo, type RunReason } from '../../shared/protocol';
import { isGithubSync, type GithubSyncEntry } from '../catalog/catalog';
import type { Config } from '../config/config';
import { ExitCode } from '../exitCodes';
import type { Logger } from '../log/logger';
import { CancelledError, type ActiveRun } from '../runs/activeRun';
import type { InAgentWork, RunMoves } from '../runs/runMoves';
import { RunRefusedError } from '../errors';
import { readProcInfo } from '../../shared/node/procInfo';
import type { PoolBackend } from '../slots/poolBackend';
import type { HeldSlot } from '../runs/runPorts';
import { appendAgentLines } from '../runs/agentRunLog';
import { DemoSimulator } from './demoSimulator';
import { legEndLines, legStartLines } from './syncProgressLog';
import { githubClientConfigFromEnv, type GithubClientConfig } from './githubClient';
import { parseRepos } from './parseRepos';
import { githubSyncStatus, type GithubSyncStatus } from './githubSyncStatus';
import { runLegInWorker } from './runLegInWorker';
import type { GithubStore, SyncTotals } from './store/githubStore';
import { openGithubStore } from './store/openGithubStore';
import { SyncTimeoutError } from './syncTimeoutError';
import { SyncWorkClock } from './syncWorkClock';
import { SyncActiveError } from './store/githubStore';
import { storageLossCause, type StorageLossCause } from './store/storageLost';
import { probeStorage, storageProbeDelay } from './storageProbe';

const MAX_TIMER_MS = 2 ** 31 - 1;

/** A running sync without progress for this long, and not hibernating, is failed as stuck. */
export const GITHUB_STUCK_AFTER_MS = 30 * 60_000;

export interface GithubRunsDeps {
  config: Config;
  logger: Logger;
  pools: ReadonlyMap<string, PoolBackend>;
  /** Only the agent adopts syncs left by a dead agent; an in-process CLI leaves them for it. */
  adopts: boolean;
  /** A change of the sync part of the snapshot. */
  onSync(sync: GithubSyncInfo): void;
  /**
   * Whether a run of this station has ended (its runs store says so): a sync of such a run still running
   * is an orphan. A run the store does not know (another station's, on a shared database) is not.
   */
  runEnded?: (runId: string) => boolean;
}

/**
 * One run of a github-sync entry in this agent, across its legs: the agent's handle on the work (the
 * slot lock it holds, its timers). The run's own state changes only through `moves`.
 */
interface SyncRun {
  state: ActiveRun;
  entry: GithubSyncEntry;
  moves: RunMoves;
  syncId: string | null;
  lock: HeldSlot['lock'] | null;
  heartbeat: NodeJS.Timeout | null;
  slot: number | null;
  wakeTimer: NodeJS.Timeout | null;
  /** The timeout's working time: runs while a leg holds the slot, stands still while hibernating. */
  clock: SyncWorkClock;
  /** Set when the working time ran out: the leg was stopped for it. */
  timedOut: SyncTimeoutError | null;
  /** Probes of a lost storage so far (the backoff's step); 0 while the storage answers. */
  storageProbes: number;
}

/**
 * The GitHub sync as in-agent work of a run (ADR 0006; agent/github/README.md): each leg holds a
 * network-light slot (the agent's own flock), a hibernation releases it and moves the run to
 * `waiting` (reason `hibernating`) with a timer at the wake-up time, which takes a slot again. A
 * storage lost mid-sync (a database restart, a full disk) does the same with `wait: storage` and a
 * probe with backoff in place of the timer (storageProbe.ts): the sync resumes from its checkpoints. The
 * wake-up time lives in github.sync, so a next agent (after a restart or kill -9) re-arms it. A
 * timeout counts working time only (syncWorkClock.ts): at its end the leg is stopped, the slot freed
 * at once, and the run ends `failed` (timeout).
 */
export class GithubRuns implements InAgentWork {
  private store: Promise<GithubStore> | null = null;
  private readonly runs = new Map<string, SyncRun>();
  private readonly self = readProcInfo(process.pid);
  private readonly simulator: DemoSimulator;
  private latest: GithubSyncInfo | null = null;
  private stuckTimer: NodeJS.Timeout | null = null;
  private closed = false;
  private started = false;
  /** What the stored syncs sent, read once the store first opens. */
  private seed: SyncTotals | null = null;

  constructor(private readonly deps: GithubRunsDeps) {
    this.simulator = new DemoSimulator(deps.logger);
  }

  get adopts(): boolean {
    return this.deps.adopts;
  }

  /** The sync part of the snapshot: the newest sync this agent knows of. */
  info(): GithubSyncInfo | null {
    return this.latest;
  }

  /**
   * The requests and hibernations of every sync stored when this process first opened the store (the
   * metrics' counters start there, so a restart is no reset); null until then. A process that never
   * starts the sync (no github-sync entry) has none to report: all zero.
   */
  totals(): SyncTotals | null {
    return this.started ? this.seed : { requests: { core: 0, graphql: 0 }, hibernations: 0, syncs: [] };
  }

  /** Opens the store in the background (a down database must not stop the agent) and shows the newest sync. */
  start(): void {
    this.started = true;
    void this.openStore()
      .then(async (store) => {
        const row = await store.latestSync();
        if (row !== null && this.latest === null) this.publish(await githubSyncStatus(store, row), row.runId, null, false);
        if (this.deps.adopts && this.stuckTimer === null) {
          this.stuckTimer = setInterval(() => {
            void this.reconcile(store);
          }, 60_000);
          this.stuckTimer.unref();
        }
      })
      .catch((err: unknown) => this.deps.logger.warn({ err: String(err) }, 'github sync storage not available'));
  }

  /**
   * The reconciler's round: stuck syncs (a leg works without progress: stuck-no-progress), and syncs of
   * this station's runs that have ended (a cancel while the storage was away could not write the row):
   * a row is never left running without a run to resume it.
   */
  private async reconcile(store: GithubStore): Promise<void> {
    try {
      const stuck = await store.reconcileStuck(GITHUB_STUCK_AFTER_MS);
      if (stuck.length > 0) this.deps.logger.warn({ syncIds: stuck }, 'github syncs without progress while working: failed as stuck');
      const ended = this.deps.runEnded;
      if (ended === undefined) return;
      const orphans = await store.reconcileOrphans(ended, 'owner-exited-while-waiting');
      if (orphans.length > 0) this.deps.logger.warn({ syncIds: orphans }, 'github syncs whose run is gone: failed');
    } catch {
      // The storage is away: the next round tries again.
    }
  }

  begin(state: ActiveRun, grant: HeldSlot, moves: RunMoves): void {
    const run = this.track(state, moves);
    this.hold(run, grant);
    moves.driving(state, this.leg(run, true));
  }

  adopt(state: ActiveRun, moves: RunMoves): void {
    if (!isGithubSync(state.entry)) return;
    const run = this.track(state, moves);
    moves.driving(
      state,
      (async () => {
        try {
          const store = await this.openStore();
          const row = await store.syncOfRun(state.run.runId);
          if (row === null || row.status !== 'running') {
            // It never got as far as a sync row, or the sync ended without its run learning it.
            this.end(
              run,
              row === null ? 'failed' : row.status === 'running' ? 'failed' : row.status,
              row === null ? 'owner-exited-while-waiting' : row.reason,
              row === null ? null : 0,
            );
            return;
          }
          run.syncId = row.id;
          run.clock = new SyncWorkClock(SyncWorkClock.leftOf(state.policy.timeoutSeconds, state.run, row.progressAt));
          this.deps.logger.info(
            { runId: state.run.runId, syncId: row.id, hibernatingUntil: row.hibernatingUntil },
            'adopted a GitHub sync left by a previous agent',
          );
          if (row.hibernatingUntil !== null) {
            if (state.run.status === 'running')
              await moves.hibernating(
                state,
                new Date(row.hibernatingUntil),
                { syncId: row.id, budget: row.budget, adopted: true },
                run.clock.left(),
              );
            this.sleep(run, row.hibernatingUntil);
          } else {
            // Killed in the middle of a leg: the checkpoints say what is left; take a slot and go on.
            if (state.run.status === 'running')
              await moves.hibernating(state, new Date(), { syncId: row.id, adopted: true }, run.clock.left());
            await this.wake(run);
          }
        } catch (err) {
          const cause = storageLossCause(err);
          // The storage is away: the run waits for it, then this adoption is done again.
          if (cause !== null) await this.awaitStorage(run, cause, String(err), () => Promise.resolve(this.adopt(state, moves)));
          else this.end(run, 'failed', 'storage-error', null, String(err));
        }
      })(),
    );
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.stuckTimer) clearInterval(this.stuckTimer);
    for (const run of this.runs.values()) {
      if (run.wakeTimer) clearTimeout(run.wakeTimer);
      run.clock.pause();
    }
    await this.simulator.stop();
    const store = this.store;
    this.store = null;
    if (store) await store.then((s) => s.db.close()).catch(() => {});
  }

  private track(state: ActiveRun, moves: RunMoves): SyncRun {
    const clock = new SyncWorkClock(SyncWorkClock.leftOf(state.policy.timeoutSeconds, state.run, null));
    const run: SyncRun = {
      state,
      entry: state.entry as GithubSyncEntry,
      moves,
      syncId: null,
      lock: null,
      slot: null,
      wakeTimer: null,
      heartbeat: null,
      clock,
      timedOut: null,
      storageProbes: 0,
    };
    this.runs.set(state.run.runId, run);
    // A cancel while hibernating: nothing runs, so the abort itself ends the sync and the run.
    state.abort.signal.addEventListener(
      'abort',
      () => {
        if (run.state.run.status !== 'waiting' || run.wakeTimer === null) return;
        clearTimeout(run.wakeTimer);
        run.wakeTimer = null;
        const reason = this.cancelReason(run);
        void this.openStore()
          .then((store) => (run.syncId !== null ? store.finish(run.syncId, 'cancelled', reason) : undefined))
          .catch(() => {})
          .then(() => this.end(run, 'cancelled', reason, null));
      },
      { once: true },
    );
    return run;
  }

  private hold(run: SyncRun, grant: HeldSlot): void {
    const { run: r } = run.state;
    run.lock = grant.lock;
    run.slot = grant.index;
    grant.lock.writeRecord({
      pid: process.pid,
      startTime: this.self?.startTime ?? 0,
      fetcher: r.fetcher,
      runId: r.runId,
      since: new Date().toISOString(),
      agentPid: process.pid,
    });
  }

  private releaseSlot(run: SyncRun): void {
    if (run.heartbeat) clearInterval(run.heartbeat);
    run.heartbeat = null;
    if (run.lock === null) return;
    run.lock.closeOwnCopy();
    const index = run.slot ?? undefined;
    run.lock = null;
    run.slot = null;
    this.deps.pools.get(run.state.run.pool)?.released(index);
  }

  /** One leg: works with the slot until the sync completes, hibernates, is cancelled or fails. */
  private async leg(run: SyncRun, first: boolean): Promise<void> {
    const { state, moves } = run;
    // The leg stops for a cancel (the run's abort) or for its timeout (this leg's only).
    const legAbort = new AbortController();
    const follow = () => legAbort.abort(state.abort.signal.reason);
    if (state.abort.signal.aborted) follow();
    else state.abort.signal.addEventListener('abort', follow, { once: true });
    try {
      const store = await this.openStore();
      if (run.syncId === null) {
        // A run whose first leg lost its storage may have its row already; else one row naming entry and run
        // at once, which the database refuses while another sync of the entry runs (one sync per entry).
        const own = await store.syncOfRun(state.run.runId);
        if (own?.status === 'running') run.syncId = own.id;
        else {
          try {
            run.syncId = await store.createSync(this.reposOf(run), { owner: { entry: state.run.fetcher, runId: state.run.runId } });
          } catch (err) {
            if (err instanceof SyncActiveError) throw new RunRefusedError('already-active', err.message);
            throw err;
          }
        }
      }
      const syncId = run.syncId;
      const workLeftMs = run.clock.start(() => this.onDeadline(run, legAbort));
      const timing = workLeftMs === null ? {} : { workLeftSeconds: Math.round(workLeftMs / 1000) };
      // The first leg starts the run; a later one wakes it from its hibernation.
      if (first) await moves.start(state, run.slot!, { syncId, ...timing }, workLeftMs);
      else await moves.wake(state, run.slot!, { syncId, budget: null, ...timing }, workLeftMs);
      // Progress is measured from here: the time the sync waited (a slot, its storage, an agent) was not work.
      await store.legBegins(syncId);
      run.storageProbes = 0;
      this.progress(run, legStartLines(first, run.slot, state.run.pool));
      run.heartbeat = setInterval(() => {
        moves.heartbeat(state, { syncId });
        void store.legAlive(syncId).catch(() => {});
      }, this.deps.config.heartbeatSeconds * 1000);
      run.heartbeat.unref();
      const client = await this.clientOf(run.entry);
      // The leg works in a thread of its own: the agent's event loop stays free for its clients.
      const outcome = await runLegInWorker(
        {
          syncId,
          client,
          databaseUrl: this.deps.config.databaseUrl,
          homeDir: this.deps.config.homeDir,
          concurrency: run.entry.concurrency,
          logLevel: this.deps.config.logLevel ?? 'info',
        },
        legAbort.signal,
        (status) => this.publish(status, state.run.runId, state.run.fetcher, run.entry.demo),
      );
      run.clock.pause();
      this.releaseSlot(run);
      if (outcome.kind === 'storage-lost') {
        this.progress(run, legEndLines(null, outcome));
        await this.awaitStorage(run, outcome.cause, outcome.message);
        return;
      }
      await store.legEnds(syncId);
      const status = await githubSyncStatus(store, syncId);
      if (status) this.publish(status, state.run.runId, state.run.fetcher, run.entry.demo);
      this.progress(
        run,
        legEndLines(
          status,
          outcome.kind === 'failed' ? { kind: outcome.reason === 'cancelled' ? 'cancelled' : 'failed', reason: outcome.reason } : outcome,
        ),
      );
      if (outcome.kind === 'hibernate' && run.timedOut !== null) {
        // The leg hibernated as its time ran out: the sync ends for the timeout all the same.
        await store.finish(syncId, 'failed', 'timeout');
        this.end(run, 'failed', 'timeout', null, run.timedOut.message);
      } else if (outcome.kind === 'hibernate') {
        await moves.hibernating(state, new Date(outcome.until), { syncId, budget: outcome.budget, kind: outcome.reason }, run.clock.left());
        this.sleep(run, outcome.until);
      } else if (outcome.kind === 'completed') {
        const partial = notReachedAnywhere(outcome.summary);
        this.end(run, 'completed', partial ? 'repos-not-reached' : null, partial ? ExitCode.notReached : 0);
      } else if (outcome.reason === 'cancelled') {
        this.end(run, 'cancelled', this.cancelReason(run), null);
      } else {
        this.end(run, 'failed', outcome.reason, null, outcome.reason === 'timeout' ? run.timedOut?.message : undefined);
      }
    } catch (err) {
      run.clock.pause();
      this.releaseSlot(run);
      const cause = storageLossCause(err);
      if (cause !== null && !state.abort.signal.aborted) {
        // Lost before the worker got going (opening the store, the sync's row, its start): wait, never fail.
        await this.awaitStorage(run, cause, (err as Error).message);
        return;
      }
      const reason = err instanceof RunRefusedError ? err.reason : 'start-error';
      if (run.syncId !== null)
        await this.openStore()
          .then((s) => s.finish(run.syncId!, 'failed', reason))
          .catch(() => {});
      this.end(run, 'failed', reason, null, (err as Error).message);
    } finally {
      state.abort.signal.removeEventListener('abort', follow);
    }
  }

  /** The sync used up its working time: the slot is free at once (the leg's last writes need none), the leg stops. */
  private onDeadline(run: SyncRun, leg: AbortController): void {
    if (leg.signal.aborted || run.lock === null) return;
    const { run: r, policy } = run.state;
    run.timedOut = new SyncTimeoutError(policy.timeoutSeconds ?? 0);
    this.deps.logger.warn({ runId: r.runId, fetcher: r.fetcher, deadline: r.deadline }, `${run.timedOut.message}; stopping it`);
    this.releaseSlot(run);
    leg.abort(run.timedOut);
  }

  /** Lines into the run's log: what the sync did, for the operator who opens it. */
  private progress(run: SyncRun, lines: string[]): void {
    const logPath = run.state.run.logPath;
    if (logPath && !appendAgentLines(logPath, lines))
      this.deps.logger.warn({ runId: run.state.run.runId }, 'could not write the sync progress into its log');
  }

  private sleep(run: SyncRun, until: number): void {
    if (this.closed) return;
    // No sleeping anywhere: one timer per hibernating run, to the wake-up time.
    // A stored wake-up time beyond what a Node timer holds (2^31-1 ms) is slept in parts, never overflowed.
    const delay = Math.max(0, until - Date.now());
    run.wakeTimer = setTimeout(
      () => {
        run.wakeTimer = null;
        if (delay > MAX_TIMER_MS) this.sleep(run, until);
        else run.moves.driving(run.state, this.wake(run));
      },
      Math.min(delay, MAX_TIMER_MS),
    );
  }

  /**
   * The storage went away: the slot is already free; the run waits (`wait: storage`; a started run by
   * the `awaitStorage` move, a run whose first leg never started in its queue) and a probe with
   * backoff looks for the storage; once it answers, `resume` (the next leg, by default) goes on from
   * the checkpoints. A cancel meanwhile ends it like a cancel of a hibernating run (the timer is the
   * run's wake timer).
   */
  private async awaitStorage(run: SyncRun, cause: StorageLossCause, message: string, resume?: () => Promise<void>): Promise<void> {
    const { state } = run;
    const wait = { kind: 'storage' as const, cause, since: new Date().toISOString() };
    this.deps.logger.warn({ runId: state.run.runId, syncId: run.syncId, cause, err: message }, 'github sync storage lost; waiting for it');
    try {
      if (state.run.status === 'running')
        await run.moves.awaitingStorage(state, wait, { syncId: run.syncId, cause, message }, run.clock.left());
      else run.moves.setWait(state, wait);
    } catch (err) {
      // The agent's own journal refused the move: nothing can be recorded, the run ends as it can.
      this.end(run, 'failed', 'storage-error', null, String(err));
      return;
    }
    run.storageProbes = 0;
    this.probeLater(run, resume ?? (() => this.wake(run)));
  }

  private probeLater(run: SyncRun, resume: () => Promise<void>): void {
    if (this.closed) return;
    run.wakeTimer = setTimeout(() => {
      run.wakeTimer = null;
      run.moves.driving(run.state, this.probe(run, resume));
    }, storageProbeDelay(run.storageProbes++));
  }

  private async probe(run: SyncRun, resume: () => Promise<void>): Promise<void> {
    if (this.closed || run.state.abort.signal.aborted) return;
    try {
      await probeStorage(await this.openStore(), run.syncId);
    } catch (err) {
      if (storageLossCause(err) === null) {
        this.end(run, 'failed', 'storage-error', null, String(err));
        return;
      }
      this.deps.logger.debug({ runId: run.state.run.runId, probes: run.storageProbes, err: String(err) }, 'github sync storage still away');
      this.probeLater(run, resume);
      return;
    }
    this.deps.logger.info(
      { runId: run.state.run.runId, syncId: run.syncId, probes: run.storageProbes },
      'github sync storage is back; resuming',
    );
    await resume();
  }

  /** Takes a slot again (waiting in the pool like any run), then the next leg. */
  private async wake(run: SyncRun): Promise<void> {
    const { state } = run;
    const pool = this.deps.pools.get(state.run.pool);
    try {
      if (!pool) throw new RunRefusedError('no-such-pool', `pool ${state.run.pool} is not configured`);
      const grant = await pool.acquire(
        state.run.runId,
        state.abort.signal,
        (position) => run.moves.setWait(state, { kind: 'pool', position }),
        (cause) => run.moves.setWait(state, { kind: 'slot-backend', cause }),
      );
      if (state.abort.signal.aborted) {
        grant.lock.closeOwnCopy();
        pool.released();
        throw state.abort.signal.reason;
      }
      this.hold(run, grant);
    } catch (err) {
      const cancelled = err instanceof CancelledError;
      const reason = cancelled ? err.reason : err instanceof RunRefusedError ? err.reason : 'slot-error';
      if (run.syncId !== null)
        await this.openStore()
          .then((s) => s.finish(run.syncId!, cancelled ? 'cancelled' : 'failed', reason))
          .catch(() => {});
      this.end(run, cancelled ? 'cancelled' : 'failed', reason, null, cancelled ? undefined : (err as Error).message);
      return;
    }
    // A run whose first leg lost its storage before it started starts now; any other resumes.
    await this.leg(run, state.run.reason !== 'hibernating');
  }

  private end(
    run: SyncRun,
    status: 'completed' | 'failed' | 'cancelled',
    reason: string | null,
    exitCode: number | null,
    message?: string,
  ): void {
    this.runs.delete(run.state.run.runId);
    run.clock.pause();
    void run.moves.finish(run.state, status, asRunReason(reason), exitCode, message);
  }

  private cancelReason(run: SyncRun): 'cancelled' | 'agent-stopping' {
    const why: unknown = run.state.abort.signal.reason;
    return why instanceof CancelledError ? why.reason : 'cancelled';
  }

  /** The run's own repositories (`github sync --repos`, checked at enqueue) or else its entry's. */
  private reposOf(run: SyncRun): string[] {
    if (run.state.run.args.length > 0) return run.state.run.args;
    const { entry } = run;
    if (entry.repos !== undefined) return entry.repos;
    try {
      return parseRepos(undefined, entry.reposFile)!;
    } catch (err) {
      throw new RunRefusedError('repos-file-invalid', (err as Error).message);
    }
  }

  private async clientOf(entry: GithubSyncEntry): Promise<GithubClientConfig> {
    if (entry.simulated === true) return { baseUrl: await this.simulator.url(), token: null, pageSize: 5 };
    return githubClientConfigFromEnv();
  }

  private openStore(): Promise<GithubStore> {
    if (this.closed) return Promise.reject(new Error('the agent is stopping'));
    this.store ??= openGithubStore({
      databaseUrl: this.deps.config.databaseUrl,
      homeDir: this.deps.config.homeDir,
      logger: this.deps.logger,
    }).then(async (store) => {
      if (this.seed === null) {
        this.seed = await store.totals().catch((err: unknown) => {
          this.deps.logger.warn({ err: String(err) }, "could not read the stored syncs' request counts; the metrics count from zero");
          return { requests: { core: 0, graphql: 0 }, hibernations: 0, syncs: [] };
        });
      }
      return store;
    });
    this.store.catch(() => {
      this.store = null;
    });
    return this.store;
  }

  private publish(status: GithubSyncStatus | null, runId: string | null, fetcher: string | null, demo: boolean): void {
    if (status === null) return;
    this.latest = { ...status, runId, fetcher, demo };
    this.deps.onSync(this.latest);
  }
}

function notReachedAnywhere(s: GithubSyncStatus): boolean {
  return s.stages.changes.notReached > 0 || s.stages.checks.notReached > 0;
}

/** The sync's reason tokens are run reasons too; an unforeseen one is recorded as `start-error`, with the token in the log. */
function asRunReason(token: string | null): RunReason | null {
  if (token === null) return null;
  return (RUN_REASONS as readonly string[]).includes(token) ? (token as RunReason) : 'start-error';
}
