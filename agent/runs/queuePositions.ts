import type { WaitReason } from '../../shared/protocol';
import type { ActiveRun } from './activeRun';
import { hasEnded } from './runGuards';
import { toRunInfo } from './runStore';
import { note, transition, type TransitionPorts } from './runTransitions';

/** How often the positions of queued runs are published while the queue moves. */
const POSITION_PUBLISH_GAP_MS = 1_000;

/**
 * Why a waiting run still waits: a new kind of wait is a move (`wait`); a shift of its place in its
 * pool's queue is progress within `waiting` (`shift`), kept in memory and published for all shifted
 * runs at most once per POSITION_PUBLISH_GAP_MS.
 */
export class QueuePositions {
  /** Queued runs whose position changed since the last publication of positions. */
  private readonly shifted = new Set<ActiveRun>();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly ports: TransitionPorts,
    private readonly isCurrent: (state: ActiveRun) => boolean,
  ) {}

  setWait(state: ActiveRun, reason: WaitReason): void {
    if (state.run.status !== 'waiting' || hasEnded(state) || state.run.reason === 'starting' || state.run.reason === 'retry-backoff')
      return;
    const before = state.run.wait;
    if (before?.kind === 'pool' && reason.kind === 'pool') {
      // Called for every run behind each grant: compared by position, not by serializing both.
      if (before.position === reason.position) return;
      // Every grant shifts every run behind it, and committing and publishing each shift made the
      // agent's work per run grow with the queue (1,000 queued runs: hundreds of commits and
      // notifications per run started). Nothing of value is lost in a crash: the next agent queues
      // the run again and counts positions anew.
      note(state.run, 'shift', { wait: reason });
      this.shifted.add(state);
      this.timer ??= setTimeout(() => this.publish(), POSITION_PUBLISH_GAP_MS).unref();
      return;
    }
    if (JSON.stringify(before) === JSON.stringify(reason)) return;
    // A new kind of wait starts its own limit: a next agent counts what is left of it from here.
    void transition(this.ports, state.run, 'wait', {
      wait: reason,
      ...(before?.kind !== reason.kind ? { waitSince: this.ports.clock.now().toISOString() } : {}),
    });
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.shifted.clear();
  }

  private publish(): void {
    this.timer = null;
    for (const state of this.shifted) {
      if (state.run.status === 'waiting' && !hasEnded(state) && this.isCurrent(state)) this.ports.publish(toRunInfo(state.run));
    }
    this.shifted.clear();
  }
}
