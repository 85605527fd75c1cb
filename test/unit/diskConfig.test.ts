import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { loadConfig } from '../../agent/config/config';
import { ConfigError } from '../../agent/config/configError';

const base = { HOME: '/home/op', QUANTILICA_CONFIG: undefined };

/** Asserts loadConfig refuses `env` with a ConfigError whose message matches every pattern. */
function refused(env: Record<string, string>, ...patterns: RegExp[]): void {
  assert.throws(
    () => loadConfig({ ...base, ...env }),
    (err: unknown) => {
      assert.ok(err instanceof ConfigError, `expected a ConfigError, got ${String(err)}`);
      for (const p of patterns) assert.match(err.message, p);
      return true;
    },
  );
}

test('pause at or above warn is refused, naming the variables', () => {
  refused(
    { CRON_DISK_PAUSE_GB: '25', CRON_DISK_WARN_GB: '25' },
    /CRON_DISK_PAUSE_GB=25/,
    /CRON_DISK_WARN_GB=25/,
    /CRON_DISK_PAUSE_GB < CRON_DISK_WARN_GB <= CRON_DISK_RESUME_GB/,
  );
  refused({ CRON_DISK_PAUSE_GB: '30' }, /CRON_DISK_PAUSE_GB=30/, /CRON_DISK_WARN_GB=25/);
});

test('resume below warn is refused, naming the variables', () => {
  refused({ CRON_DISK_RESUME_GB: '20' }, /CRON_DISK_RESUME_GB=20/, /CRON_DISK_WARN_GB=25/, /must satisfy/);
});

test('a negative threshold is refused, naming the variable and the allowed range', () => {
  refused({ CRON_DISK_PAUSE_GB: '-1' }, /CRON_DISK_PAUSE_GB="-1": allowed: from 0/);
  refused({ CRON_DISK_WARN_GB: '-0.5' }, /CRON_DISK_WARN_GB="-0.5": allowed: from 0/);
  refused({ CRON_DISK_POLL_SECONDS: '-15' }, /CRON_DISK_POLL_SECONDS="-15"/);
});

test('decimal thresholds are accepted, and warn may equal resume', () => {
  const config = loadConfig({
    ...base,
    CRON_DISK_PAUSE_GB: '0.08',
    CRON_DISK_WARN_GB: '0.15',
    CRON_DISK_RESUME_GB: '0.15',
    CRON_DISK_POLL_SECONDS: '0.05',
  });
  assert.deepEqual(config.disk, { warnGb: 0.15, pauseGb: 0.08, resumeGb: 0.15, pollSeconds: 0.05, maxWaitSeconds: 3600 });
});
