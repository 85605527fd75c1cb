import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { KeptExposition } from './keptExposition';
import { RUN_DURATION_BUCKETS, type RunTotals } from './runTotals';
import {
  GITHUB_BUDGETS,
  isFinalStatus,
  type DiskGateState,
  type DiskStatus,
  type GithubBudget,
  type GithubSyncInfo,
  type PoolState,
  type RunInfo,
  type ScheduleStatus,
  type SpoolStatus,
} from '../../shared/protocol';

/**
 * What the metrics read: the agent's state as it is now (pools, waiting runs, disk, spool, sync: each
 * already in memory), the schedule once when none was published yet, the run store once at start.
 */
export interface MetricsSources {
  version: string;
  pools(): PoolState[];
  activeRuns(): RunInfo[];
  schedule(): ScheduleStatus | null;
  disk(): DiskStatus | null;
  spool(): SpoolStatus | null;
  sync(): GithubSyncInfo | null;
  /**
   * What every stored sync sent (by budget) and how often it hibernated, with each sync's share
   * (newest first): the GitHub counters start from it, so a restart is no reset. Null until the
   * sync's store has answered.
   */
  githubTotals(): GithubTotals | null;
  /** What the runs already ended in the run store add: the counters start from it, so a restart is no reset. */
  finished(): RunTotals;
}

export interface GithubTotals {
  requests: Record<GithubBudget, number>;
  hibernations: number;
  syncs: ReadonlyArray<{ id: string; requests: Record<GithubBudget, number>; hibernations: number }>;
}

/** Syncs whose counters are remembered, so that the next figures of each add only what moved. */
const MAX_SYNCS = 64;

const GATE_STATES: readonly DiskGateState[] = ['ok', 'warn', 'paused', 'unknown'];
/** Finished runs remembered so a republished end is not counted twice. */
const MAX_COUNTED = 4096;
/**
 * How old the pools' figures of a scrape may be: a read takes the kernel's lock table and each slot's
 * file (the costliest part of a scrape), and slots held outside the agent (a shell's flock) move
 * without an event. Prometheus scrapes every 15 s or more, so each of its scrapes still reads afresh.
 */
const POOLS_MAX_AGE_MS = 1000;
/** The disk gate reports GB of 10^9 bytes (diskProbe). */
const GB = 1e9;

/**
 * The agent's Prometheus metrics, in registries of their own (never prom-client's global one): counters
 * and the duration histogram move as runs end (seeded from the run store at start), gauges are read
 * from the agent's state at each scrape. The run-end metrics (a histogram per fetcher: most of the
 * text) and the per-fetcher gauges have registries of their own whose text and bytes are kept until
 * the next run end or published schedule, so a scrape formats and encodes only what moved.
 */
export class AgentMetrics {
  readonly registry = new Registry();
  /** The run-end counters and histogram: they move only when a run ends. */
  private readonly ends = new KeptExposition(new Registry());
  /** The per-fetcher gauges (lateness, last success): they move only when the schedule is published or a run ends. */
  private readonly perFetcher = new KeptExposition(new Registry());
  private readonly finished: Counter<'fetcher' | 'outcome'>;
  private readonly duration: Histogram<'fetcher'>;
  private readonly retries: Counter<'fetcher'>;
  private readonly counted = new Set<string>();
  /** Per GitHub sync, the requests and hibernations last counted, for the totals. */
  private readonly syncs = new Map<string, { requests: Record<GithubBudget, number>; hibernations: number }>();
  /** Every sync's requests and hibernations: from the store at start, then what each sync seen adds; null until the store answered. */
  private syncTotals: { requests: Record<GithubBudget, number>; hibernations: number } | null = null;
  /**
   * The schedule as last published (its lateness moves only when it publishes), so a scrape never
   * recomputes it: Schedule.status() reads the run store for each entry, which with 100 fetchers and
   * 10,000 runs of history took tens of milliseconds a scrape.
   */
  private schedule: ScheduleStatus | null = null;
  /** Each fetcher's latest completed finish (ms), from the run store at start, then from run ends. */
  private readonly lastSuccess = new Map<string, number>();
  /** The pools as last read, and when (POOLS_MAX_AGE_MS). */
  private pools: { at: number; states: PoolState[] } | null = null;

  constructor(
    private readonly sources: MetricsSources,
    private readonly now: () => number = Date.now,
  ) {
    const r = this.registry;
    const ends = [this.ends.registry];
    const perFetcher = this.perFetcher.registry;
    this.finished = new Counter({
      name: 'quantilica_runs_finished_total',
      help: 'Runs that ended, by fetcher and outcome (completed, failed, cancelled, skipped).',
      labelNames: ['fetcher', 'outcome'],
      registers: ends,
    });
    this.duration = new Histogram({
      name: 'quantilica_run_duration_seconds',
      help: 'Wall time of ended runs, from start to finish.',
      labelNames: ['fetcher'],
      buckets: [...RUN_DURATION_BUCKETS],
      registers: ends,
    });
    this.retries = new Counter({
      name: 'quantilica_run_retries_total',
      help: 'Tries after the first of ended runs (a retry policy), by fetcher.',
      labelNames: ['fetcher'],
      registers: ends,
    });
    this.countStored(sources.finished());
    const s = sources;
    const syncCounts = () => this.syncCounts();
    gauge(r, 'quantilica_pool_slots', 'Slots of each pool.', ['pool'], (g) => {
      for (const p of this.poolsNow()) g.set({ pool: p.name }, p.size);
    });
    gauge(r, 'quantilica_pool_slots_used', 'Slots of each pool held now (by runs of this agent or any other holder).', ['pool'], (g) => {
      for (const p of this.poolsNow()) g.set({ pool: p.name }, p.used);
    });
    gauge(
      r,
      'quantilica_runs_waiting',
      'Runs waiting now, by pool and by what they wait for (pool, disk, admission, hibernating, retry, slot-backend).',
      ['pool', 'reason'],
      (g) => {
        for (const p of this.poolsNow()) g.set({ pool: p.name, reason: 'pool' }, 0);
        const counts = new Map<string, { pool: string; reason: string; n: number }>();
        for (const run of s.activeRuns()) {
          if (run.status !== 'waiting') continue;
          const reason = run.wait?.kind ?? run.reason ?? 'queued';
          const key = `${run.pool}\0${reason}`;
          const c = counts.get(key) ?? { pool: run.pool, reason, n: 0 };
          c.n += 1;
          counts.set(key, c);
        }
        for (const c of counts.values()) g.set({ pool: c.pool, reason: c.reason }, c.n);
      },
    );
    gauge(
      perFetcher,
      'quantilica_fetcher_late',
      '1 while a scheduled fetcher is late (no completed run within its lateAfterMinutes of a due time), else 0.',
      ['fetcher'],
      (g) => {
        for (const e of this.scheduleNow()?.entries ?? [])
          if (e.lateAfterMinutes != null) g.set({ fetcher: e.fetcher }, e.lateSince ? 1 : 0);
      },
    );
    gauge(
      perFetcher,
      'quantilica_fetcher_last_success_timestamp_seconds',
      'When the fetcher last completed a run (Unix time).',
      ['fetcher'],
      (g) => {
        for (const e of this.scheduleNow()?.entries ?? []) {
          const at = this.lastSuccess.get(e.fetcher);
          if (at !== undefined) g.set({ fetcher: e.fetcher }, at / 1000);
        }
      },
    );
    gauge(r, 'quantilica_disk_free_bytes', "Free bytes on the data folder's filesystem, as the disk gate last read them.", [], (g) => {
      const free = s.disk()?.freeGb;
      if (free != null) g.set(Math.round(free * GB));
    });
    gauge(r, 'quantilica_disk_gate', "The disk gate's state: 1 for the current one.", ['state'], (g) => {
      const state = s.disk()?.state ?? 'unknown';
      for (const st of GATE_STATES) g.set({ state: st }, st === state ? 1 : 0);
    });
    gauge(r, 'quantilica_spool_events', 'Telemetry events in the spool, not yet in PostgreSQL.', [], (g) => g.set(s.spool()?.pending ?? 0));
    gauge(r, 'quantilica_spool_oldest_event_age_seconds', 'Age of the oldest event in the spool (0 when empty).', [], (g) =>
      g.set(s.spool()?.oldestAgeSeconds ?? 0),
    );
    gauge(
      r,
      'quantilica_github_quota_remaining',
      'Requests the GitHub API said are left in each budget at its last answer.',
      ['budget'],
      (g) => {
        for (const [budget, q] of Object.entries(s.sync()?.quota ?? {})) if (q) g.set({ budget }, q.remaining);
      },
    );
    // No samples until the store answered: a series absent for a moment, never a false reset to 0.
    new Counter({
      name: 'quantilica_github_requests_total',
      help: 'Requests the GitHub syncs sent, by the rate-limit budget each was reserved on (core, graphql).',
      labelNames: ['budget'],
      registers: [r],
      collect() {
        this.reset();
        const counts = syncCounts();
        if (counts) for (const budget of GITHUB_BUDGETS) this.inc({ budget }, counts.requests[budget]);
      },
    });
    new Counter({
      name: 'quantilica_github_hibernations_total',
      help: 'Rate-limit hibernations of the GitHub syncs.',
      registers: [r],
      collect() {
        this.reset();
        this.inc(syncCounts()?.hibernations ?? 0);
      },
    });
    new Gauge({
      name: 'quantilica_agent_info',
      help: "The agent's version (always 1).",
      labelNames: ['version'],
      registers: [r],
      collect() {
        this.set({ version: s.version }, 1);
      },
    });
  }

  /** Counts a run that ended (each run once, however often its end is published). */
  observe(run: RunInfo): void {
    if (!isFinalStatus(run.status) || this.counted.has(run.runId)) return;
    this.counted.add(run.runId);
    if (this.counted.size > MAX_COUNTED) this.counted.delete(this.counted.values().next().value as string);
    this.count(run);
  }

  /** The schedule the agent published (at its start, when an entry's lateness or a pause moved). */
  observeSchedule(status: ScheduleStatus): void {
    this.schedule = status;
    this.perFetcher.changed();
  }

  /** The Prometheus text exposition of every metric, as of now. */
  async text(): Promise<string> {
    const live = await this.registry.metrics();
    return `${await this.ends.textNow()}${await this.perFetcher.textNow()}${live}`;
  }

  /**
   * The same exposition as `text`, as the bytes of an HTTP answer: the run-end part (most of it) is
   * kept encoded, so a scrape encodes only the live gauges and the server sends a ready buffer.
   */
  async body(): Promise<Buffer> {
    const live = Buffer.from(await this.registry.metrics(), 'utf8');
    return Buffer.concat([await this.ends.body(), await this.perFetcher.body(), live]);
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  private poolsNow(): PoolState[] {
    const now = this.now();
    if (this.pools === null || now - this.pools.at >= POOLS_MAX_AGE_MS || now < this.pools.at)
      this.pools = { at: now, states: this.sources.pools() };
    return this.pools.states;
  }

  /** The published schedule, or (nothing published yet: a CLI, a scrape before the schedule starts) its status once. */
  private scheduleNow(): ScheduleStatus | null {
    this.schedule ??= this.sources.schedule();
    return this.schedule;
  }

  /**
   * The store's ended runs, counted as `count` would one by one, from their totals: one increment per
   * label set, and per duration bucket its runs observed at their mean (which keeps each bucket's
   * count and the sum) through the fetcher's child.
   */
  private countStored({ ends, durations }: RunTotals): void {
    if (ends.length === 0) return;
    this.ends.changed();
    this.perFetcher.changed();
    const retries = new Map<string, number>();
    for (const e of ends) {
      this.finished.inc({ fetcher: e.fetcher, outcome: e.status }, e.runs);
      if (e.status === 'completed' && e.lastFinished) {
        const at = Date.parse(e.lastFinished);
        if (Number.isFinite(at) && at > (this.lastSuccess.get(e.fetcher) ?? -Infinity)) this.lastSuccess.set(e.fetcher, at);
      }
      // A skipped run without retries leaves the counter unborn, as `count` does.
      if (e.retries > 0 || e.status !== 'skipped') retries.set(e.fetcher, (retries.get(e.fetcher) ?? 0) + e.retries);
    }
    for (const [fetcher, n] of retries) this.retries.inc({ fetcher }, n);
    for (const d of durations) {
      if (d.runs <= 0) continue;
      const child = this.duration.labels({ fetcher: d.fetcher });
      // The mean of values in a bucket is in it; the bound caps a rounding above it.
      const mean = Math.min(d.seconds / d.runs, RUN_DURATION_BUCKETS[d.bucket] ?? Infinity);
      for (let i = 0; i < d.runs; i++) child.observe(mean);
    }
  }

  private count(run: {
    fetcher: string;
    status: string;
    startedAt: string | null;
    finishedAt: string | null;
    attempt?: number | null;
  }): void {
    this.ends.changed();
    this.perFetcher.changed();
    this.finished.inc({ fetcher: run.fetcher, outcome: run.status });
    if (run.status === 'completed' && run.finishedAt) {
      const at = Date.parse(run.finishedAt);
      if (Number.isFinite(at) && at > (this.lastSuccess.get(run.fetcher) ?? -Infinity)) this.lastSuccess.set(run.fetcher, at);
    }
    if (run.startedAt && run.finishedAt) {
      const seconds = (Date.parse(run.finishedAt) - Date.parse(run.startedAt)) / 1000;
      if (Number.isFinite(seconds) && seconds >= 0) this.duration.observe({ fetcher: run.fetcher }, seconds);
    }
    const retries = Math.max(0, (run.attempt ?? 1) - 1);
    if (retries > 0) this.retries.inc({ fetcher: run.fetcher }, retries);
    else if (run.status !== 'skipped') this.retries.inc({ fetcher: run.fetcher }, 0);
  }

  /**
   * Requests (by budget) and hibernations of every sync: the store's totals at start, then what the
   * sync now shown added since its figures were last counted (a sync in the store's totals counts
   * from what it had there). Null until the store answered.
   */
  private syncCounts(): { requests: Record<GithubBudget, number>; hibernations: number } | null {
    if (this.syncTotals === null) {
      const seed = this.sources.githubTotals();
      if (seed === null) return null;
      this.syncTotals = { requests: { ...seed.requests }, hibernations: seed.hibernations };
      for (const s of seed.syncs.slice(0, MAX_SYNCS).reverse())
        this.syncs.set(s.id, { requests: { ...s.requests }, hibernations: s.hibernations });
    }
    const sync = this.sources.sync();
    if (sync) {
      const seen = this.syncs.get(sync.syncId);
      const c = sync.counters;
      const now = { requests: { core: c.requests_core ?? 0, graphql: c.requests_graphql ?? 0 }, hibernations: c.hibernations };
      for (const budget of GITHUB_BUDGETS)
        this.syncTotals.requests[budget] += Math.max(0, now.requests[budget] - (seen?.requests[budget] ?? 0));
      this.syncTotals.hibernations += Math.max(0, now.hibernations - (seen?.hibernations ?? 0));
      this.syncs.delete(sync.syncId);
      this.syncs.set(sync.syncId, now);
      if (this.syncs.size > MAX_SYNCS) this.syncs.delete(this.syncs.keys().next().value as string);
    }
    return this.syncTotals;
  }
}

/** A gauge whose values are set afresh from the agent's state at each scrape. */
function gauge<L extends string>(registry: Registry, name: string, help: string, labelNames: L[], fill: (g: Gauge<L>) => void): void {
  new Gauge<L>({
    name,
    help,
    labelNames,
    registers: [registry],
    collect() {
      this.reset();
      fill(this);
    },
  });
}
