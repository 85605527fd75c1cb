import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { loadConfig } from '../../agent/config/config';
import { ConfigError } from '../../agent/config/configError';

const base = { HOME: '/home/op', QUANTILICA_CONFIG: undefined };

test('defaults follow the seed', () => {
  const config = loadConfig({ ...base });
  assert.equal(config.usePools, false);
  assert.deepEqual(config.pools['heavy-io'], { slots: 3, waitTimeoutSeconds: 21600, memoryMb: 12288, runTimeoutSeconds: 0 });
  assert.equal(config.pools['cpu-analysis'].slots, 2);
  assert.equal(config.pools['network-light'].slots, 6);
  assert.deepEqual(config.disk, { warnGb: 25, pauseGb: 10, resumeGb: 35, pollSeconds: 15, maxWaitSeconds: 3600 });
  assert.equal(config.dataDir, '/home/op/data');
  assert.equal(config.lockDir, '/tmp/quantilica_locks');
  assert.equal(config.telemetrySpool, '/home/op/.quantilica/telemetry_spool.db');
});

test('a bad value names the variable, the value and what is allowed', () => {
  assert.throws(
    () => loadConfig({ ...base, CRON_POOL_HEAVY_IO_SLOTS: 'three' }),
    (err: unknown) => {
      assert.ok(err instanceof ConfigError);
      assert.match(err.message, /CRON_POOL_HEAVY_IO_SLOTS="three": allowed: a whole number from 1 to 256/);
      return true;
    },
  );
  assert.throws(() => loadConfig({ ...base, CRON_USE_POOLS: 'maybe' }), /CRON_USE_POOLS="maybe": allowed: true, false/);
  assert.throws(() => loadConfig({ ...base, DATA_DIR: 'relative/dir' }), /DATA_DIR="relative\/dir": allowed: an absolute path/);
});
