import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { Catalog } from '../../agent/catalog/catalog';
import { isRetryable, retryDelayMs, runPolicy } from '../../agent/runs/runPolicy';
import { IllegalMoveError, transition } from '../../agent/runs/runTransitions';
import type { StoredRun } from '../../agent/runs/runStore';

const entry = (extra: Record<string, unknown>) =>
  Catalog.parse({ fetchers: [{ name: 'f', pool: 'heavy-io', argv: ['true'], ...extra }] }, 'test').resolve('f');

test('the delay before try n+1 is min(max, backoff × 2^(n−1)), with equal jitter between half and all of it', () => {
  const policy = runPolicy(entry({ retry: { attempts: 10, backoffSeconds: 30, maxBackoffSeconds: 100 } }));
  // Try 2 follows try 1 after 30 s, try 3 after 60 s, then the cap.
  assert.deepEqual(
    [2, 3, 4, 5].map((n) => retryDelayMs(policy, n, () => 1)),
    [30_000, 60_000, 100_000, 100_000],
  );
  assert.deepEqual(
    [2, 3, 4].map((n) => retryDelayMs(policy, n, () => 0)),
    [15_000, 30_000, 50_000],
  );
  for (let i = 0; i < 200; i++) {
    const d = retryDelayMs(policy, 3);
    assert.ok(d >= 30_000 && d <= 60_000, String(d));
  }
});

test('what retries: listed exit codes, else any but 126 and 127; never a cancel, a refusal, a memory-limit or timeout without their flags', () => {
  const plain = runPolicy(entry({ retry: { attempts: 3 } }));
  const failed = (
    reason: 'exit-code' | 'signal' | 'memory-limit' | 'timeout' | 'wait-timeout' | 'disk-backpressure-timeout',
    exitCode: number | null = 1,
  ) => ({ status: 'failed' as const, reason, exitCode });
  assert.equal(isRetryable(plain, failed('exit-code', 75)), true);
  assert.equal(isRetryable(plain, failed('exit-code', 126)), false);
  assert.equal(isRetryable(plain, failed('exit-code', 127)), false);
  assert.equal(isRetryable(plain, failed('memory-limit', 137)), false);
  assert.equal(isRetryable(plain, failed('timeout', null)), false);
  assert.equal(isRetryable(plain, failed('wait-timeout', null)), false);
  assert.equal(isRetryable(plain, failed('disk-backpressure-timeout', null)), false);
  assert.equal(isRetryable(plain, { status: 'cancelled', reason: 'cancelled', exitCode: null }), false);
  assert.equal(isRetryable(plain, { status: 'cancelled', reason: 'stalled', exitCode: null }), true);
  const listed = runPolicy(entry({ retry: { attempts: 3, exitCodes: [75] }, retryMemoryLimit: true, retryOnTimeout: true }));
  assert.equal(isRetryable(listed, failed('exit-code', 1)), false);
  assert.equal(isRetryable(listed, failed('exit-code', 75)), true);
  assert.equal(isRetryable(listed, failed('memory-limit', 137)), true);
  assert.equal(isRetryable(listed, failed('timeout', null)), true);
  assert.equal(isRetryable(runPolicy(entry({})), failed('exit-code', 75)), false, 'no policy, no retry');
});

test("the entry's timeoutSeconds wins over the pool's; 0 means none", () => {
  assert.equal(runPolicy(entry({}), 600).timeoutSeconds, 600);
  assert.equal(runPolicy(entry({ timeoutSeconds: 5 }), 600).timeoutSeconds, 5);
  assert.equal(runPolicy(entry({ timeoutSeconds: 0 }), 600).timeoutSeconds, null);
  assert.equal(runPolicy(entry({}), 0).timeoutSeconds, null);
});

test('a named move whose precondition does not hold is refused before anything changes', () => {
  const run = { runId: 'r', status: 'waiting', reason: null } as unknown as StoredRun;
  const ports = {
    journal: { commit: () => Promise.resolve(), record: () => Promise.resolve(), get: () => null, active: () => [] },
    clock: { now: () => new Date() },
    publish: () => {},
  };
  assert.throws(() => transition(ports, run, 'retryWake'), IllegalMoveError, 'a wake needs a run in its retry backoff');
  assert.throws(() => transition(ports, run, 'retryWait'), IllegalMoveError, 'only a running try fails into a retry');
  assert.throws(() => transition(ports, run, 'deadline'), IllegalMoveError);
  assert.deepEqual([run.status, run.reason], ['waiting', null]);
});
