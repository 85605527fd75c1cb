import { ErrorCodes, isFinalStatus, type RunInfo } from '../../shared/protocol';
import { ownerOf, signalOwner } from './runOwner';
import { ClientError, UnknownRunError } from '../errors';
import { ExitCode } from '../exitCodes';
import { readProcInfo } from '../../shared/node/procInfo';
import type { RunManager } from './runManager';
import { toRunInfo, type RunStore, type StoredRun } from './runStore';

const POLL_MS = 250;

export interface ForeignRunsDeps {
  store: RunStore;
  runs: RunManager;
  /** A foreign run seen to end: the agent publishes it (its owner's moves reach no client of ours). */
  onEnded(run: StoredRun): void;
}

/**
 * Active runs of the shared run store that another process of this user manages: a `quantilica run`
 * (cron, or `--detach`'s owner) started while no agent ran, seen by an agent that started later, or
 * by another CLI. They are cancelled by asking their owner (SIGTERM to a process proven to be that
 * `quantilica` process by pid, start time, uid and command line), which cancels its run as Ctrl-C
 * does; they are waited for by reading the store, and adopted once their owner is gone.
 */
export class ForeignRuns {
  private readonly watched = new Set<string>();
  private closed = false;

  constructor(private readonly deps: ForeignRunsDeps) {}

  /** The stored run when it is active and not this process's own. */
  active(runId: string): StoredRun | null {
    const found = this.standing(runId);
    return found?.active ? found.run : null;
  }

  /** A run that is not this process's own as the store has it, read once: another process's (active) or ended; null when unknown or ours. */
  standing(runId: string): { run: StoredRun; active: boolean } | null {
    if (this.deps.runs.isOwnRun(runId)) return null;
    const run = this.deps.store.get(runId);
    return run ? { run, active: !isFinalStatus(run.status) } : null;
  }

  /** Active foreign runs of a fetcher (by its catalog name). */
  activeOf(fetcher: string): StoredRun[] {
    return this.deps.store.active().filter((r) => r.fetcher === fetcher && !this.deps.runs.isOwnRun(r.runId));
  }

  /** Active foreign runs of every fetcher. */
  all(): StoredRun[] {
    return this.deps.store.active().filter((r) => !this.deps.runs.isOwnRun(r.runId));
  }

  /**
   * Cancels a foreign run: adopted and cancelled here when its owner is gone, else its owner is
   * asked. A run whose owner cannot be asked (an agent that does not answer, a process that is not
   * ours to signal) is refused with exit 69, naming the owner.
   */
  async cancel(runId: string): Promise<RunInfo> {
    const stored = this.active(runId);
    if (stored === null) throw new UnknownRunError(runId);
    const owner = ownerOf(stored);
    if (owner === 'gone') {
      await this.deps.runs.adoptLeftovers();
      if (this.deps.runs.isOwnRun(runId)) return this.deps.runs.cancel(runId);
      // A run an agent left queued for the next agent: cancelled here, it never starts.
      const kept = await this.deps.runs.cancelKept(runId);
      if (kept) return kept;
    }
    const state = owner === 'cli' ? readProcInfo(stored.ownerPid)?.state : undefined;
    if (state === 'T' || state === 't') {
      // A stopped owner would take the signal and do nothing until resumed: say so instead of waiting.
      throw new ClientError(
        ErrorCodes.unavailable,
        ExitCode.agentUnavailable,
        `run ${runId} is managed by the quantilica process ${stored.ownerPid}, which is stopped (state ${state}); resume it (kill -CONT ${stored.ownerPid}) and cancel again`,
      );
    }
    if (owner === 'cli' && signalOwner(stored)) {
      // Nobody may wait for it: its end is still published when it comes.
      if (!this.watched.has(runId)) {
        this.watched.add(runId);
        this.wait(runId, false)
          .catch(() => undefined)
          .finally(() => this.watched.delete(runId));
      }
      return toRunInfo(stored);
    }
    const who =
      owner === 'agent'
        ? `the agent (pid ${stored.ownerPid}), which does not answer; try again when it does`
        : `process ${stored.ownerPid}, which is not a quantilica process of yours that can be asked to cancel it`;
    throw new ClientError(ErrorCodes.unavailable, ExitCode.agentUnavailable, `run ${runId} is managed by ${who}`);
  }

  /** Stops every wait (the store is about to close). */
  close(): void {
    this.closed = true;
  }

  /**
   * Resolves with the run once it has ended (read from the store), or follows it here when its owner
   * dies first. `keepAlive`: a caller awaits it, so the process must not exit meanwhile.
   */
  wait(runId: string, keepAlive = true): Promise<RunInfo> {
    return new Promise<RunInfo>((resolve, reject) => {
      const poll = async () => {
        const stored = this.deps.store.get(runId);
        if (stored === null) throw new UnknownRunError(runId);
        if (isFinalStatus(stored.status)) {
          this.deps.onEnded(stored);
          return toRunInfo(stored);
        }
        if (!this.deps.runs.isOwnRun(runId) && ownerOf(stored) === 'gone') await this.deps.runs.adoptLeftovers();
        if (this.deps.runs.isOwnRun(runId)) return this.deps.runs.waitRun(runId);
        return null;
      };
      const step = () => {
        if (this.closed) {
          reject(
            new ClientError(ErrorCodes.unavailable, ExitCode.agentUnavailable, `stopped following run ${runId}: this process is closing`),
          );
          return;
        }
        poll().then(
          (done) => {
            if (done === null) {
              const timer = setTimeout(step, POLL_MS);
              if (!keepAlive) timer.unref();
              return;
            }
            resolve(done);
          },
          (err: unknown) => {
            reject(err instanceof Error ? err : new Error(String(err)));
          },
        );
      };
      step();
    });
  }
}
