import assert from 'node:assert/strict';
import { test } from 'node:test';
import { BudgetTracker } from '../../agent/github/budgetTracker';
import { RateLimitedError, secondaryBackoffMs } from '../../agent/github/rateLimited';

const headers = (remaining: number, reset: number, resource = 'core', date?: string) => ({
  'x-ratelimit-remaining': String(remaining),
  'x-ratelimit-limit': '5000',
  'x-ratelimit-reset': String(reset),
  'x-ratelimit-resource': resource,
  ...(date ? { date } : {}),
});

test('the preventive pause: below 2 x cost the budget refuses to send, until its reset', () => {
  let now = 1_000_000_000_000;
  const t = new BudgetTracker(() => now);
  const reset = now / 1000 + 60;
  t.observe(headers(3, reset));
  t.reserve('core'); // 3 left: sends, 2 left
  t.reserve('core'); // 2 left: sends, 1 left
  assert.throws(
    () => t.reserve('core'),
    (e: unknown) => e instanceof RateLimitedError && e.kind === 'preventive' && e.until === reset * 1000,
  );
  t.reserve('graphql'); // another budget is not affected
  now = reset * 1000 + 1;
  t.reserve('core');
});

test('answers out of order: within a window the smallest remaining wins; a new window replaces it', () => {
  const now = 1_000_000_000_000;
  const t = new BudgetTracker(() => now);
  const reset = now / 1000 + 60;
  t.observe(headers(100, reset));
  t.observe(headers(40, reset));
  t.observe(headers(90, reset));
  assert.equal(t.snapshot().core?.remaining, 40);
  t.observe(headers(5000, reset + 3600));
  assert.equal(t.snapshot().core?.remaining, 5000);
});

test('a server clock 10 minutes ahead: the wake-up is the reset on our clock, never earlier', () => {
  const now = 1_000_000_000_000;
  const t = new BudgetTracker(() => now);
  const skew = 600_000;
  const serverNow = now + skew + 400; // the Date header truncates to the second
  const reset = Math.floor(serverNow / 1000) + 30;
  t.observe(headers(0, reset, 'core', new Date(serverNow).toUTCString()), now);
  const error = t.limited('core', headers(0, reset), 'primary');
  assert.ok(error.until >= reset * 1000 - skew - 400 && error.until <= reset * 1000 - skew, `${error.until - (reset * 1000 - skew)}`);
});

test('secondary limits: retry-after when given; else 60 s, doubling with each in a row', () => {
  const now = 1_000_000_000_000;
  const t = new BudgetTracker(() => now);
  assert.equal(t.limited('core', { 'retry-after': '30' }, 'secondary').until, now + 30_000);
  let at = now;
  const u = new BudgetTracker(() => at);
  assert.equal(u.limited('core', {}, 'secondary').until, now + 60_000);
  // Met again by another request while that wait lasts (another stage, a request in flight): the same wait.
  u.secondaryStreak = 1;
  assert.equal(u.limited('graphql', {}, 'secondary').until, now + 60_000);
  // Met again after it: longer.
  at = now + 60_000;
  u.secondaryStreak = 2;
  assert.equal(u.limited('graphql', {}, 'secondary').until, at + 240_000);
  assert.deepEqual([0, 1, 2, 3].map(secondaryBackoffMs), [60_000, 120_000, 240_000, 480_000]);
  assert.throws(() => u.reserve('graphql'), RateLimitedError);
});

test("a secondary limit is the token's: met on one budget, no request on the other is sent before it ends; a primary limit stays its budget's", () => {
  let now = 1_000_000_000_000;
  const t = new BudgetTracker(() => now);
  const met = t.limited('graphql', { 'retry-after': '120' }, 'secondary');
  assert.throws(
    () => t.reserve('core'),
    (err: unknown) => err === met,
    'the REST stage stops on the same wait, named by the budget that met it',
  );
  now += 120_000;
  t.reserve('core');
  t.reserve('graphql');
  t.limited('core', headers(0, now / 1000 + 600), 'primary');
  assert.throws(() => t.reserve('core'), RateLimitedError);
  t.reserve('graphql');
});
