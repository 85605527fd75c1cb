import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { Cron } from 'croner';
import { cronPeriod, previousRun } from '../../agent/schedule/cronPeriod';

const HOUR = 3_600_000;

test('the period is the gap between the occurrences around now', () => {
  const now = new Date('2025-03-10T08:00:00Z');
  assert.equal(cronPeriod(new Cron('15 */6 * * *', { timezone: 'UTC' }), now), 6 * HOUR);
  assert.equal(cronPeriod(new Cron('0 3 * * *', { timezone: 'UTC' }), now), 24 * HOUR);
  assert.equal(cronPeriod(new Cron('0 3 * * 1', { timezone: 'UTC' }), now), 7 * 24 * HOUR);
  assert.equal(previousRun(new Cron('0 3 * * *', { timezone: 'UTC' }), now)?.toISOString(), '2025-03-10T03:00:00.000Z');
  assert.equal(
    previousRun(new Cron('0 8 * * *', { timezone: 'UTC' }), now)?.toISOString(),
    now.toISOString(),
    'an occurrence at now is the previous one',
  );
});

test('across a DST change a daily period is 23 or 25 hours', () => {
  // New York springs forward on 9 March 2025 and falls back on 2 November 2025.
  const daily = new Cron('0 12 * * *', { timezone: 'America/New_York' });
  assert.equal(cronPeriod(daily, new Date('2025-03-09T00:00:00Z')), 23 * HOUR);
  assert.equal(cronPeriod(daily, new Date('2025-11-02T00:00:00Z')), 25 * HOUR);
});

test('a yearly pattern is found years back', () => {
  const leap = new Cron('0 0 29 2 *', { timezone: 'UTC' });
  assert.equal(previousRun(leap, new Date('2027-01-01T00:00:00Z'))?.toISOString(), '2024-02-29T00:00:00.000Z');
});
