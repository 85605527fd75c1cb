import assert from 'node:assert/strict';
import { test } from 'node:test';
import { openAgent } from '../../agent/openAgent';
import type { ChangedParams } from '../../shared/protocol';
import { makeTestEnv, testConfig } from '../support/harness';
import { memoryLogger } from '../support/memoryLogger';

// The composition root builds the state hub first: the disk gate's first reading, published while
// the parts start, reaches the hub's listeners and the snapshot (an earlier design made the parts
// before the hub and dropped such changes).
test('openAgent: the hub exists before the parts, so their first changes reach it; close undoes start', async () => {
  const t = makeTestEnv(null);
  const agent = openAgent(testConfig(t), memoryLogger(), { role: 'cli' });
  const seen: ChangedParams[] = [];
  const stop = agent.control.hub.onChange((p) => seen.push(p));
  try {
    await agent.start();
    const disk = seen.find((p) => p.change.kind === 'disk');
    assert.ok(disk, `the gate's first reading was published (saw ${seen.map((p) => p.change.kind).join(', ') || 'nothing'})`);
    assert.deepEqual(
      seen.map((p) => p.version),
      seen.map((_, i) => i + 1),
      'versions start at 1 and have no gap',
    );
    const snapshot = agent.control.hub.snapshot();
    assert.notEqual(snapshot.disk, null);
    assert.notEqual(snapshot.spool, null);
    assert.ok(snapshot.schedule !== null && snapshot.schedule.entries.length > 0, 'the schedule is built (not started) in a CLI');
    assert.ok(snapshot.catalog.length > 0);
  } finally {
    stop();
    await agent.close();
  }
});
