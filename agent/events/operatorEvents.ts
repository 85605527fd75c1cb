import {
  isFinalStatus,
  type Change,
  type DiskGateState,
  type OperatorEvent,
  type OperatorEventName,
  type RunInfo,
  type ScheduleStatus,
} from '../../shared/protocol';

/** What the derivation remembers of a run between two of its changes. */
interface RunMark {
  status: RunInfo['status'];
  reason: RunInfo['reason'];
  stalled: boolean;
}

export interface OperatorEventsOptions {
  /** The pool of a catalog fetcher (for `late`, which has no run); null when unknown. */
  poolOf(fetcher: string): string | null;
  /** The outcome of each fetcher's last finished run before this agent (`recovered` after a restart). */
  lastOutcomes?: ReadonlyMap<string, 'completed' | 'failed'>;
  now?: () => Date;
}

/** Finished runs remembered so a republished end is not a second event; old ones are forgotten in order. */
const MAX_FINISHED_MARKS = 2048;

/**
 * The operator events (the hook, `quantilica events`, the metrics), derived in one place from what the
 * state hub publishes: each event is a transition of a run, the disk gate or the schedule between two
 * of their published states, so it is told once however often the state is published.
 */
export class OperatorEvents {
  private readonly runs = new Map<string, RunMark>();
  private readonly outcomes: Map<string, 'completed' | 'failed'>;
  private diskPaused = false;
  private readonly late = new Map<string, string>();
  private readonly now: () => Date;

  constructor(private readonly options: OperatorEventsOptions) {
    this.outcomes = new Map(options.lastOutcomes ?? []);
    this.now = options.now ?? (() => new Date());
  }

  /** The events one published change makes (none for most). */
  derive(change: Change): OperatorEvent[] {
    switch (change.kind) {
      case 'run':
        return this.fromRun(change.run);
      case 'disk':
        return this.fromDisk(change.disk.state);
      case 'schedule':
        return this.fromSchedule(change.schedule);
      default:
        return [];
    }
  }

  private fromRun(run: RunInfo): OperatorEvent[] {
    const before = this.runs.get(run.runId);
    if (before !== undefined && isFinalStatus(before.status)) return [];
    const stalled = run.stalledSince != null;
    this.remember(run.runId, { status: run.status, reason: run.reason, stalled });
    const out: OperatorEvent[] = [];
    const entered = before === undefined || before.status !== run.status || before.reason !== run.reason;
    if (run.status === 'waiting' && entered && run.reason === 'retry-backoff') {
      // The try that failed: the one before the try the backoff waits for.
      const attempt = run.wait?.kind === 'retry' ? run.wait.attempt - 1 : (run.attempt ?? null);
      out.push(this.event('retrying', run, { attempt }));
    }
    if (run.status === 'waiting' && entered && run.reason === 'hibernating') out.push(this.event('sync-hibernated', run));
    if (run.status === 'running' && stalled && before?.stalled !== true) out.push(this.event('stalled', run));
    if (run.status === 'failed') {
      out.push(this.event('failed', run));
      if (run.reason === 'timeout') out.push(this.event('timeout', run));
      this.outcomes.set(run.fetcher, 'failed');
    }
    if (run.status === 'completed') {
      if (this.outcomes.get(run.fetcher) === 'failed') out.push(this.event('recovered', run));
      if (run.reason === 'repos-not-reached') out.push(this.event('sync-not-reached', run));
      this.outcomes.set(run.fetcher, 'completed');
    }
    return out;
  }

  private fromDisk(state: DiskGateState): OperatorEvent[] {
    // `unknown` (the probe failed) neither pauses nor resumes: the gate keeps what it was.
    if (state === 'paused' && !this.diskPaused) {
      this.diskPaused = true;
      return [this.bare('disk-paused')];
    }
    if (this.diskPaused && (state === 'ok' || state === 'warn')) {
      this.diskPaused = false;
      return [this.bare('disk-resumed')];
    }
    return [];
  }

  private fromSchedule(schedule: ScheduleStatus): OperatorEvent[] {
    const out: OperatorEvent[] = [];
    for (const entry of schedule.entries) {
      const since = entry.lateSince ?? null;
      if (since === null) {
        this.late.delete(entry.fetcher);
        continue;
      }
      if (this.late.get(entry.fetcher) === since) continue;
      this.late.set(entry.fetcher, since);
      out.push({ ...this.bare('late'), fetcher: entry.fetcher, pool: this.options.poolOf(entry.fetcher), reason: 'late', at: since });
    }
    return out;
  }

  private remember(runId: string, mark: RunMark): void {
    this.runs.delete(runId);
    this.runs.set(runId, mark);
    if (this.runs.size <= MAX_FINISHED_MARKS) return;
    // Map order is insertion order: the oldest finished marks go first; active runs are re-inserted on each change.
    for (const [id, m] of this.runs) {
      if (this.runs.size <= MAX_FINISHED_MARKS) break;
      if (isFinalStatus(m.status)) this.runs.delete(id);
    }
  }

  private event(event: OperatorEventName, run: RunInfo, extra: Partial<OperatorEvent> = {}): OperatorEvent {
    return {
      event,
      at: this.now().toISOString(),
      runId: run.runId,
      fetcher: run.fetcher,
      pool: run.pool,
      exitCode: run.exitCode,
      reason: run.reason,
      attempt: run.attempt ?? null,
      logPath: run.logPath,
      ...extra,
    };
  }

  private bare(event: OperatorEventName): OperatorEvent {
    return {
      event,
      at: this.now().toISOString(),
      runId: null,
      fetcher: null,
      pool: null,
      exitCode: null,
      reason: null,
      attempt: null,
      logPath: null,
    };
  }
}
