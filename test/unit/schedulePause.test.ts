import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { ScheduleStatus } from '../../shared/protocol';
import { UnknownFetcherError } from '../../agent/errors';
import { type Logger } from '../../agent/log/logger';
import { memoryLogger } from '../support/memoryLogger';
import { ManualClock } from '../support/manualClock';
import { Schedule } from '../../agent/schedule/schedule';
import type { ScheduleTarget } from '../../agent/schedule/scheduleTarget';
import { StateHub } from '../../agent/state/stateHub';

const HOUR = 3_600_000;
const fetchers = [
  { name: 'anac', schedule: '0 1 * * *', timezone: 'UTC' },
  { name: 'tse', schedule: '0 2 * * *', timezone: 'UTC' },
  { name: 'rfb-cnpj', schedule: '0 3 * * *', timezone: 'UTC' },
  { name: 'sidra' }, // in the catalog, not scheduled
];
const day = (d: number, h = 0) => new Date(Date.UTC(2025, 2, d, h, 30));

/** Records which fetchers were queued; runs finish at once. */
class StartedList implements ScheduleTarget {
  readonly started: string[] = [];
  isActive(): boolean {
    return false;
  }
  enqueue(fetcher: string): void {
    this.started.push(fetcher);
  }
  recordSkipped(fetcher: string, reason: string): void {
    throw new Error(`unexpected skip of ${fetcher}: ${reason}`);
  }
  lastStartedAt(): Date | null {
    return null;
  }
}

function setup(t: { after(fn: () => void): void }) {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'schedule-pause-'));
  t.after(() => fs.rmSync(home, { recursive: true, force: true }));
  const clock = new ManualClock(day(10));
  const target = new StartedList();
  const open = (logger: Logger = memoryLogger(), hub?: StateHub) => {
    const s = new Schedule({ fetchers, target, logger, homeDir: home, catchUp: true, clock, hub });
    t.after(() => s.close());
    return s;
  };
  return { home, clock, target, open };
}

test('pause and resume per fetcher and globally; the pause survives a restart', (t) => {
  const { home, clock, target, open } = setup(t);
  const hub = new StateHub(() => {
    throw new Error('snapshot not used in this test');
  });
  const published: ScheduleStatus[] = [];
  hub.onChange((p) => {
    if (p.change.kind === 'schedule') published.push(p.change.schedule);
  });
  const first = open(memoryLogger(), hub);
  first.start();
  const status = first.setPaused(true, 'anac');
  assert.equal(status.entries.find((e) => e.fetcher === 'anac')?.paused, true);
  assert.equal(published.at(-1)?.entries.find((e) => e.fetcher === 'anac')?.paused, true, 'the change is published');
  clock.advance(2 * HOUR); // past 01:00 and 02:00
  assert.deepEqual(target.started, ['tse']);

  first.setPaused(true);
  clock.advance(HOUR); // past 03:00
  assert.deepEqual(target.started, ['tse'], 'nothing starts while the whole schedule is paused');
  first.close();
  assert.deepEqual(fs.readdirSync(home), ['schedule.json'], 'no temporary file is left behind');

  const second = open();
  assert.equal(second.status().paused, true);
  assert.deepEqual(
    second
      .status()
      .entries.filter((e) => e.paused)
      .map((e) => e.fetcher),
    ['anac'],
  );
  second.start();
  second.setPaused(false);
  clock.advance(24 * HOUR);
  assert.deepEqual(target.started, ['tse', 'tse', 'rfb-cnpj'], 'anac stays paused after the global resume');
  second.setPaused(false, 'anac');
  clock.advance(24 * HOUR);
  assert.deepEqual(target.started.slice(3), ['anac', 'tse', 'rfb-cnpj']);
  assert.equal(second.status().entries.find((e) => e.fetcher === 'sidra')?.nextDue, null);
  assert.throws(() => second.setPaused(true, 'nope'), UnknownFetcherError);
});

test('a corrupt state file is a clear error, the schedule runs on defaults and nothing else is lost', (t) => {
  const { home, clock, target, open } = setup(t);
  const file = path.join(home, 'schedule.json');
  fs.writeFileSync(file, '{"version": 1, "paused": tru');
  fs.writeFileSync(path.join(home, 'telemetry_spool.db'), 'other state');
  const logger = memoryLogger();
  const s = open(logger);
  const errors = logger.records.filter((r) => r.level === 'error');
  assert.equal(errors.length, 1);
  assert.match(
    errors[0].msg ?? '',
    new RegExp(
      `the schedule state ${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} is corrupt \\(not valid JSON.*\\); using defaults \\(nothing paused\\); the file was moved to .*schedule\\.json\\.corrupt-`,
    ),
  );
  assert.equal(s.status().paused, false);
  s.start();
  clock.advance(HOUR);
  assert.deepEqual(target.started, ['anac']);

  const files = fs.readdirSync(home).sort();
  assert.equal(files.length, 2);
  assert.equal(files[0].startsWith('schedule.json.corrupt-'), true);
  assert.equal(fs.readFileSync(path.join(home, files[0]), 'utf8'), '{"version": 1, "paused": tru', 'the corrupt content is kept');
  assert.equal(fs.readFileSync(path.join(home, 'telemetry_spool.db'), 'utf8'), 'other state');
});

test('a well-formed file with the wrong shape is refused the same way; unknown fetchers in it are kept', (t) => {
  const { home, open } = setup(t);
  const file = path.join(home, 'schedule.json');
  fs.writeFileSync(file, JSON.stringify({ version: 1, paused: 'yes', pausedFetchers: [] }));
  const logger = memoryLogger();
  open(logger);
  assert.match(logger.records.find((r) => r.level === 'error')?.msg ?? '', /is corrupt \(paused: Expected boolean/);

  // A fetcher removed from the catalog stays paused in the file, for when it comes back.
  fs.writeFileSync(file, JSON.stringify({ version: 1, paused: false, pausedFetchers: ['retired'] }));
  const s = open();
  s.setPaused(true, 'tse');
  assert.deepEqual((JSON.parse(fs.readFileSync(file, 'utf8')) as { pausedFetchers: string[] }).pausedFetchers, ['retired', 'tse']);
});
