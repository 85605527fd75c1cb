import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { SEED_SOURCES } from '../../agent/catalog/seedSources';
import { ConfigError } from '../../agent/config/configError';
import { memoryLogger } from '../support/memoryLogger';
import type { Clock } from '../../agent/schedule/clock';
import { ManualClock } from '../support/manualClock';
import { Schedule } from '../../agent/schedule/schedule';
import type { ScheduleTarget } from '../../agent/schedule/scheduleTarget';

const MIN = 60_000;
const HOUR = 60 * MIN;
// São Paulo has had no DST since 2019: local time is UTC-3 all year, which keeps expectations simple.
const TZ = 'America/Sao_Paulo';
const fetchers = SEED_SOURCES.map((s) => ({ name: s.name, schedule: s.schedule, timezone: TZ }));
/** 00:00 in São Paulo on the given day of March 2025. */
const localMidnight = (day: number) => new Date(Date.UTC(2025, 2, day, 3, 0, 0));

interface Call {
  at: Date;
  fetcher: string;
  kind: 'enqueue' | 'skipped';
  trigger?: string;
  reason?: string;
  message?: string;
}

/**
 * The run side as the schedule sees it: queued runs become active for a while (every run lasts
 * 20 minutes, except where the test says otherwise) and are remembered as the last start.
 */
class RecordingTarget implements ScheduleTarget {
  readonly calls: Call[] = [];
  private readonly endsAt = new Map<string, number>();
  private readonly lastStart = new Map<string, Date>();
  constructor(
    private readonly clock: Clock,
    private readonly durationMs: (fetcher: string, at: Date) => number = () => 20 * MIN,
  ) {}
  isActive(fetcher: string): boolean {
    return (this.endsAt.get(fetcher) ?? 0) > this.clock.now().getTime();
  }
  enqueue(fetcher: string, trigger: 'schedule' | 'catch-up'): void {
    const at = this.clock.now();
    assert.ok(!this.isActive(fetcher), `${fetcher} enqueued at ${at.toISOString()} while still active`);
    this.calls.push({ at, fetcher, kind: 'enqueue', trigger });
    this.lastStart.set(fetcher, at);
    this.endsAt.set(fetcher, at.getTime() + this.durationMs(fetcher, at));
  }
  recordSkipped(fetcher: string, reason: string, _trigger: string, message: string): void {
    this.calls.push({ at: this.clock.now(), fetcher, kind: 'skipped', reason, message });
  }
  lastStartedAt(fetcher: string): Date | null {
    return this.lastStart.get(fetcher) ?? null;
  }
}

/** The seed grid's occurrences in one local day, computed from the patterns by hand (not by croner). */
function expectedDay(day: number): Array<{ fetcher: string; at: string }> {
  const out: Array<{ fetcher: string; at: string }> = [];
  for (const s of SEED_SOURCES) {
    const [minute, hour] = s.schedule.split(' ');
    const hours = hour === '*/6' ? [0, 6, 12, 18] : [Number(hour)];
    for (const h of hours)
      out.push({ fetcher: s.name, at: new Date(localMidnight(day).getTime() + h * HOUR + Number(minute) * MIN).toISOString() });
  }
  return out.sort((a, b) => a.at.localeCompare(b.at) || a.fetcher.localeCompare(b.fetcher));
}

function homeDir(t: { after(fn: () => void): void }): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'schedule-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test('over one simulated day every fetcher fires at its time, and a run still going is skipped, not doubled', (t) => {
  const clock = new ManualClock(new Date(localMidnight(10).getTime() - 30_000));
  // bcb-sgs's midnight run takes 7 hours: its 06:15 occurrence falls due while it still runs.
  const target = new RecordingTarget(clock, (f, at) =>
    f === 'bcb-sgs' && at.getTime() < localMidnight(10).getTime() + HOUR ? 7 * HOUR : 20 * MIN,
  );
  const schedule = new Schedule({ fetchers, target, logger: memoryLogger(), homeDir: homeDir(t), catchUp: true, clock });
  t.after(() => schedule.close());
  schedule.start();
  clock.advanceTo(new Date(localMidnight(11).getTime() - 1000));

  const sgs0615 = new Date(localMidnight(10).getTime() + 6 * HOUR + 15 * MIN).toISOString();
  const expected = expectedDay(10).filter((e) => !(e.fetcher === 'bcb-sgs' && e.at === sgs0615));
  const enqueued = target.calls
    .filter((c) => c.kind === 'enqueue')
    .map((c) => ({ fetcher: c.fetcher, at: c.at.toISOString() }))
    .sort((a, b) => a.at.localeCompare(b.at) || a.fetcher.localeCompare(b.fetcher));
  assert.equal(expected.length, 24 + 3, 'the seed grid: 24 daily sources and bcb-sgs four times a day, one skipped');
  assert.deepEqual(enqueued, expected);
  assert.ok(target.calls.filter((c) => c.kind === 'enqueue').every((c) => c.trigger === 'schedule'));

  const skipped = target.calls.filter((c) => c.kind === 'skipped');
  assert.equal(skipped.length, 1);
  assert.equal(skipped[0].fetcher, 'bcb-sgs');
  assert.equal(skipped[0].at.toISOString(), sgs0615);
  assert.equal(skipped[0].reason, 'already-active', 'the reason is a token');
  assert.match(skipped[0].message ?? '', /an earlier run of bcb-sgs is still running or waiting/);

  const status = schedule.status();
  assert.equal(status.entries.length, 25);
  const comex = status.entries.find((e) => e.fetcher === 'comex');
  assert.deepEqual(comex, {
    fetcher: 'comex',
    cron: '0 0 * * *',
    timezone: TZ,
    nextDue: localMidnight(11).toISOString(),
    paused: false,
    lastRunAt: localMidnight(10).toISOString(),
  });
});

test('after a 6-hour downtime each overdue fetcher runs once at start, and only those', (t) => {
  const home = homeDir(t);
  const clock = new ManualClock(new Date(localMidnight(10).getTime() - 30_000));
  const target = new RecordingTarget(clock);
  const before = new Schedule({ fetchers, target, logger: memoryLogger(), homeDir: home, catchUp: true, clock });
  before.start();
  const downAt = new Date(localMidnight(11).getTime() + 90 * MIN); // 01:30 on the second day
  clock.advanceTo(downAt);
  before.close();
  const upAt = new Date(downAt.getTime() + 6 * HOUR);
  clock.advanceTo(upAt); // the agent is down: nothing fires
  assert.equal(target.calls.filter((c) => c.at > downAt).length, 0);

  const after = new Schedule({ fetchers, target, logger: memoryLogger(), homeDir: home, catchUp: true, clock });
  t.after(() => after.close());
  after.start();
  const missed = expectedDay(11)
    .filter((e) => e.at > downAt.toISOString() && e.at <= upAt.toISOString())
    .map((e) => e.fetcher);
  assert.deepEqual([...missed].sort(), ['bcb-sgs', 'datasus', 'inmet', 'pdet', 'rfb-cnpj', 'rtn', 'tesouro-direto', 'tse']);
  const caughtUp = target.calls.filter((c) => c.trigger === 'catch-up');
  assert.deepEqual(caughtUp.map((c) => c.fetcher).sort(), [...missed].sort());
  assert.ok(caughtUp.every((c) => c.at.getTime() === upAt.getTime()));

  // The rest of the day follows the grid; nothing caught up runs a second time for the same miss.
  clock.advanceTo(new Date(localMidnight(12).getTime() - 1000));
  const afterStart = target.calls.filter((c) => c.at >= upAt && c.kind === 'enqueue').map((c) => `${c.fetcher}@${c.at.toISOString()}`);
  const regular = expectedDay(11)
    .filter((e) => e.at > upAt.toISOString())
    .map((e) => `${e.fetcher}@${e.at}`);
  assert.deepEqual(afterStart.sort(), [...missed.map((f) => `${f}@${upAt.toISOString()}`), ...regular].sort());
});

test('catch-up configured off runs nothing at start; never-run fetchers wait for their time', (t) => {
  const clock = new ManualClock(localMidnight(10));
  const target = new RecordingTarget(clock);
  target.enqueue('comex', 'schedule');
  clock.advance(30 * HOUR);
  const off = new Schedule({ fetchers, target, logger: memoryLogger(), homeDir: homeDir(t), catchUp: false, clock });
  off.start();
  off.close();
  assert.equal(target.calls.length, 1);
  const on = new Schedule({ fetchers, target, logger: memoryLogger(), homeDir: homeDir(t), catchUp: true, clock });
  t.after(() => on.close());
  on.start();
  // comex last ran 30 h ago (period 24 h); the others never ran and are not a burst at first start.
  assert.deepEqual(
    target.calls.slice(1).map((c) => `${c.fetcher}:${c.trigger}`),
    ['comex:catch-up'],
  );
});

test('clock steps: forward runs each missed fetcher once; a small step back repeats nothing; a big one is followed', (t) => {
  const clock = new ManualClock(new Date(localMidnight(10).getTime() + 90 * MIN));
  const target = new RecordingTarget(clock);
  const schedule = new Schedule({ fetchers, target, logger: memoryLogger(), homeDir: homeDir(t), catchUp: false, clock });
  t.after(() => schedule.close());
  schedule.start();
  clock.jump(3 * HOUR); // 01:30 → 04:30 wall time, no time elapsed for timers
  clock.advance(MIN);
  assert.deepEqual(target.calls.map((c) => c.fetcher).sort(), ['pdet', 'rfb-cnpj', 'tse']);

  const n = target.calls.length;
  clock.jump(-HOUR); // 04:31 → 03:31: rfb-cnpj's 03:00 already ran
  clock.advance(2 * HOUR);
  assert.deepEqual(
    target.calls.slice(n).map((c) => c.fetcher),
    ['datasus'],
    'pdet (04:00) ran at 04:31 and does not run again at the repeated 04:00',
  );

  // A step back by two days: due times two days ahead are brought back, or nothing would run for two days.
  const m = target.calls.length;
  clock.jump(-48 * HOUR); // 05:31 on the 10th → 05:31 on the 8th
  clock.advance(2 * HOUR);
  const on8th = (h: number, min: number) => new Date(localMidnight(8).getTime() + h * HOUR + min * MIN).toISOString();
  assert.deepEqual(
    target.calls.slice(m).map((c) => `${c.fetcher}@${c.at.toISOString()}`),
    [`tesouro-direto@${on8th(6, 0)}`, `rtn@${on8th(6, 15)}`, `bcb-sgs@${on8th(6, 15)}`, `inmet@${on8th(7, 0)}`],
  );
});

test('an invalid cron expression or time zone is refused, naming the fetcher', () => {
  const clock = new ManualClock(localMidnight(10));
  const build = (f: { name: string; schedule: string; timezone?: string }) =>
    new Schedule({ fetchers: [f], target: new RecordingTarget(clock), logger: memoryLogger(), homeDir: os.tmpdir(), catchUp: true, clock });
  assert.throws(
    () => build({ name: 'anac', schedule: '0 25 * * *' }),
    (err: unknown) => err instanceof ConfigError && /fetcher anac: schedule "0 25 \* \* \*"/.test(err.message),
  );
  assert.throws(
    () => build({ name: 'tse', schedule: '0 3 * * *', timezone: 'Mars/Olympus' }),
    /fetcher tse: .*timezone "Mars\/Olympus": Invalid time zone/,
  );
  assert.throws(() => build({ name: 'b3', schedule: '12:00' }), /fetcher b3: schedule "12:00": expected a cron expression/);
});
