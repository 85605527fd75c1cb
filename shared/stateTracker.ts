// The client side of "versioned snapshot + ordered changes": the CLI's client and the extension both
// keep their copy of the agent's state with this, so neither can drift from the other.
import { isFinalStatus, type ChangedParams, type RunInfo, type Snapshot } from './protocol';

/** Finished runs a client keeps; the active ones are always kept. */
export const MAX_FINISHED_RUNS = 100;

/** How many runs of a list applyChange made are finished (a list is never changed once made). */
const finishedCounts = new WeakMap<readonly RunInfo[], number>();

function finishedIn(runs: readonly RunInfo[]): number {
  const known = finishedCounts.get(runs);
  if (known !== undefined) return known;
  let n = 0;
  for (const r of runs) if (isFinalStatus(r.status)) n += 1;
  return n;
}

/** The snapshot after one change: a pure function, the input is left untouched. */
export function applyChange(snapshot: Snapshot, params: ChangedParams): Snapshot {
  const next: Snapshot = { ...snapshot, version: params.version };
  const change = params.change;
  switch (change.kind) {
    case 'run': {
      // Most recently changed first: a run that just finished is the newest finished one. A burst's
      // queue makes the runs thousands, and each run several changes: the list is copied natively
      // (concat) and the finished runs are counted once per list, not at every change.
      const old = snapshot.runs;
      const id = change.run.runId;
      let at = -1;
      for (let i = 0; i < old.length; i++) {
        if (old[i].runId === id) {
          at = i;
          break;
        }
      }
      let finished = finishedIn(old) - (at >= 0 && isFinalStatus(old[at].status) ? 1 : 0) + (isFinalStatus(change.run.status) ? 1 : 0);
      const runs = at < 0 ? [change.run].concat(old) : [change.run].concat(old.slice(0, at), old.slice(at + 1));
      // The finished runs past the cap go, the least recently changed first; the changed run stays.
      for (let i = runs.length - 1; finished > MAX_FINISHED_RUNS && i > 0; i--) {
        if (isFinalStatus(runs[i].status)) {
          runs.splice(i, 1);
          finished -= 1;
        }
      }
      finishedCounts.set(runs, finished);
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
