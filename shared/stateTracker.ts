// The client side of "versioned snapshot + ordered changes": the CLI's client and the extension both
// keep their copy of the agent's state with this, so neither can drift from the other.
import { isFinalStatus, type ChangedParams, type Snapshot } from './protocol';

/** Finished runs a client keeps; the active ones are always kept. */
export const MAX_FINISHED_RUNS = 100;

/** The snapshot after one change: a pure function, the input is left untouched. */
export function applyChange(snapshot: Snapshot, params: ChangedParams): Snapshot {
  const next: Snapshot = { ...snapshot, version: params.version };
  const change = params.change;
  switch (change.kind) {
    case 'run': {
      // Most recently changed first: a run that just finished is the newest finished one. One pass
      // (a burst's queue makes the runs thousands, and each run several changes): the changed run
      // first, its older copy out, the finished runs past the cap out.
      const runs = [change.run];
      let finished = isFinalStatus(change.run.status) ? 1 : 0;
      for (const r of snapshot.runs) {
        if (r.runId === change.run.runId) continue;
        if (isFinalStatus(r.status) && ++finished > MAX_FINISHED_RUNS) continue;
        runs.push(r);
      }
      next.runs = runs;
      break;
    }
    case 'pool': {
      const pools = snapshot.pools.slice();
      const at = pools.findIndex((p) => p.name === change.pool.name);
      if (at >= 0) pools[at] = change.pool;
      else pools.push(change.pool);
      next.pools = pools;
      break;
    }
    case 'disk':
      next.disk = change.disk;
      break;
    case 'spool':
      next.spool = change.spool;
      break;
    case 'schedule':
      next.schedule = change.schedule;
      break;
    case 'sync':
      next.sync = change.sync;
      break;
  }
  return next;
}

export type TrackOutcome =
  /** Applied on top of the previous version. */
  | { kind: 'applied'; snapshot: Snapshot }
  /** Already contained in the snapshot (a replay after reconnecting): ignored. */
  | { kind: 'duplicate' }
  /** Held until a snapshot arrives (none yet, or a resynchronisation is under way). */
  | { kind: 'held' }
  /** A version was skipped: the owner must fetch a snapshot and call `reset`. Reported once per gap. */
  | { kind: 'gap'; expected: number; received: number };

/**
 * Keeps one client's copy of the agent's state. Changes that arrive before the first snapshot (the
 * agent may push one before its hello answer arrives) or during a resynchronisation are held and
 * applied on top of the snapshot, skipping those it already contains.
 */
export class StateTracker {
  private current: Snapshot | null = null;
  private held: ChangedParams[] = [];
  private resyncing = false;

  get snapshot(): Snapshot | null {
    return this.current;
  }

  apply(params: ChangedParams): TrackOutcome {
    if (this.current === null || this.resyncing) {
      this.held.push(params);
      return { kind: 'held' };
    }
    const expected = this.current.version + 1;
    if (params.version < expected) return { kind: 'duplicate' };
    if (params.version > expected) {
      this.resyncing = true;
      this.held.push(params);
      return { kind: 'gap', expected, received: params.version };
    }
    this.current = applyChange(this.current, params);
    return { kind: 'applied', snapshot: this.current };
  }

  /**
   * Takes a fresh snapshot and applies the held changes newer than it. `gap` is true when the held
   * changes themselves skip a version (the owner fetches another snapshot).
   */
  reset(snapshot: Snapshot): { applied: ChangedParams[]; gap: boolean } {
    this.current = snapshot;
    this.resyncing = false;
    const held = this.held.sort((a, b) => a.version - b.version);
    this.held = [];
    const applied: ChangedParams[] = [];
    for (const [i, params] of held.entries()) {
      const outcome = this.apply(params);
      if (outcome.kind === 'applied') applied.push(params);
      if (outcome.kind === 'gap') {
        // Keep the rest for the next snapshot (the gapped one is already held again).
        this.held.push(...held.slice(i + 1));
        return { applied, gap: true };
      }
    }
    return { applied, gap: false };
  }

  /** Forgets the state (disconnected): the next snapshot starts afresh. */
  clear(): void {
    this.current = null;
    this.held = [];
    this.resyncing = false;
  }
}
