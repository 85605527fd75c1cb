// `node out/bench/schedule.js`: the schedule's next-due computation for the 25 seed sources over a
// year of cron ticks: croner's nextRun alone, then the whole Schedule driven through a simulated
// year on a ManualClock (timer wake-ups, due checks, queueing into a counting target).
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Cron } from 'croner';
import { SEED_SOURCES } from '../agent/catalog/seedSources';
import { ManualClock } from '../test/support/manualClock';
import { Schedule } from '../agent/schedule/schedule';
import type { ScheduleTarget } from '../agent/schedule/scheduleTarget';

// Empty BENCH_TZ: no time zone option, croner computes in the process's local zone (much faster:
// with a zone, croner converts through Intl's toLocaleString on every step).
const TZ = process.env.BENCH_TZ ?? 'America/Sao_Paulo';
const zone = TZ === '' ? {} : { timezone: TZ };
const start = new Date('2025-01-01T03:00:00Z');
const end = new Date('2026-01-01T03:00:00Z');

function nextDueOnly(): { ticks: number; ms: number } {
  const crons = SEED_SOURCES.map((s) => new Cron(s.schedule, zone));
  let ticks = 0;
  const t0 = process.hrtime.bigint();
  for (const cron of crons) {
    // From a second before the start and up to the end inclusive: the simulated year's window.
    for (let t = cron.nextRun(new Date(start.getTime() - 1000)); t !== null && t <= end; t = cron.nextRun(t)) ticks += 1;
  }
  return { ticks, ms: Number(process.hrtime.bigint() - t0) / 1e6 };
}

class CountingTarget implements ScheduleTarget {
  enqueued = 0;
  isActive(): boolean {
    return false;
  }
  enqueue(): void {
    this.enqueued += 1;
  }
  recordSkipped(): void {}
  lastStartedAt(): Date | null {
    return null;
  }
}

function simulatedYear(): { fires: number; wakeups: number; ms: number } {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-schedule-'));
  try {
    const clock = new ManualClock(start);
    let wakeups = 0;
    const setTimer = clock.setTimer.bind(clock);
    clock.setTimer = (fn, ms) =>
      setTimer(() => {
        wakeups += 1;
        fn();
      }, ms);
    const target = new CountingTarget();
    const fetchers = SEED_SOURCES.map((s) => ({ name: s.name, schedule: s.schedule, ...zone }));
    // A logger that drops records: the bench measures scheduling, not log formatting.
    const quiet = { debug() {}, info() {}, warn() {}, error() {} };
    const schedule = new Schedule({ fetchers, target, logger: quiet, homeDir: home, catchUp: false, clock });
    const t0 = process.hrtime.bigint();
    schedule.start();
    clock.advanceTo(end);
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    schedule.close();
    return { fires: target.enqueued, wakeups, ms };
  } finally {
    fs.rmSync(home, { recursive: true, force: true });
  }
}

const pure = nextDueOnly();
const sim = simulatedYear();
const rows: Array<[string, string]> = [
  [`cron ticks in a year, 25 sources (${TZ || 'local zone'})`, String(pure.ticks)],
  ['next-due computation (croner nextRun), total ms', pure.ms.toFixed(1)],
  ['next-due computation, µs per tick', ((pure.ms * 1000) / pure.ticks).toFixed(1)],
  ['simulated year through Schedule: runs queued', String(sim.fires)],
  ['simulated year: timer wake-ups (at most a minute apart)', String(sim.wakeups)],
  ['simulated year: total ms', sim.ms.toFixed(1)],
  ['simulated year: µs per queued run (all work included)', ((sim.ms * 1000) / sim.fires).toFixed(1)],
  ['simulated year: µs per wake-up', ((sim.ms * 1000) / sim.wakeups).toFixed(2)],
];
const width = Math.max(...rows.map(([k]) => k.length));
for (const [k, v] of rows) console.log(`${k.padEnd(width)}  ${v}`);
console.log(
  JSON.stringify({
    bench: 'schedule',
    timezone: TZ || null,
    sources: SEED_SOURCES.length,
    ticks: pure.ticks,
    nextDueMs: +pure.ms.toFixed(2),
    nextDueUsPerTick: +((pure.ms * 1000) / pure.ticks).toFixed(2),
    simulatedRuns: sim.fires,
    simulatedWakeups: sim.wakeups,
    simulatedMs: +sim.ms.toFixed(2),
    simulatedUsPerRun: +((sim.ms * 1000) / sim.fires).toFixed(2),
    node: process.version,
  }),
);
