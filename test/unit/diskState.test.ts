import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { DiskConfig } from '../../agent/config/config';
import { nextDiskState, nextThreshold } from '../../agent/disk/diskState';

const disk: DiskConfig = { warnGb: 25, pauseGb: 10, resumeGb: 35, pollSeconds: 15, maxWaitSeconds: 3600 };

test('states follow the seed thresholds, with hysteresis between pause and resume', () => {
  assert.equal(nextDiskState(40, false, disk), 'ok');
  assert.equal(nextDiskState(25, false, disk), 'ok', 'warn is below 25, not at 25');
  assert.equal(nextDiskState(24.99, false, disk), 'warn');
  assert.equal(nextDiskState(10, false, disk), 'warn', 'paused is below 10, not at 10');
  assert.equal(nextDiskState(9.99, false, disk), 'paused');
  assert.equal(nextDiskState(20, true, disk), 'paused', 'freed to between pause and resume: still paused');
  assert.equal(nextDiskState(34.99, true, disk), 'paused');
  assert.equal(nextDiskState(35, true, disk), 'ok', 'at the resume level the gate opens');
});

test('the next threshold is the crossing that changes the state, with its distance', () => {
  assert.deepEqual(nextThreshold('ok', 40, disk), { threshold: 'warn', gb: 25, distanceGb: 15 });
  assert.deepEqual(nextThreshold('warn', 12, disk), { threshold: 'pause', gb: 10, distanceGb: 2 });
  assert.deepEqual(nextThreshold('warn', 24, disk), { threshold: 'warn', gb: 25, distanceGb: 1 });
  assert.deepEqual(nextThreshold('paused', 20.5, disk), { threshold: 'resume', gb: 35, distanceGb: 14.5 });
  assert.equal(nextThreshold('unknown', null, disk), null);
});
