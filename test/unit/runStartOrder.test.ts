import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { RunMemory } from '../../agent/memory/runMemory';
import { deferred, managerBed, settle } from '../support/runFakes';
import { waitFor } from '../support/waitFor';

/** Run cgroups made as the test says: each run's prepare resolves when the test lets it. */
function heldMemory(): { memory: RunMemory; prepared: Map<string, (env: Record<string, string>) => void> } {
  const prepared = new Map<string, (env: Record<string, string>) => void>();
  const memory: RunMemory = {
    prepare: (runId) => {
      const made = deferred<Record<string, string>>();
      prepared.set(runId, (env) => made.resolve(env));
      return made.promise;
    },
    track: () => {},
    usage: () => null,
    signal: () => false,
    ended: () => {},
    release: () => null,
  };
  return { memory, prepared };
}

test("runs granted in order spawn in that order, even when a later run's cgroup is made first", async (t) => {
  const { memory, prepared } = heldMemory();
  const bed = managerBed({ memory });
  t.after(() => bed.close());
  const first = await bed.pastGate();
  const second = await bed.pastGate();
  bed.slots.grantNext(0);
  bed.slots.grantNext(1);
  await waitFor(() => prepared.has(first.runId) && prepared.has(second.runId), { what: 'both cgroups asked for' });

  prepared.get(second.runId)!({ QUANTILICA_CGROUP_PROCS: '/second' });
  await settle();
  await settle();
  assert.equal(bed.spawner.processes.length, 0, 'the second run waits for the first, granted before it');

  prepared.get(first.runId)!({ QUANTILICA_CGROUP_PROCS: '/first' });
  await waitFor(() => bed.spawner.processes.length === 2, { what: 'both spawns' });
  assert.deepEqual(
    bed.spawner.processes.map((p) => [p.opts.env.QUANTILICA_RUN_ID, p.opts.env.QUANTILICA_CGROUP_PROCS]),
    [
      [first.runId, '/first'],
      [second.runId, '/second'],
    ],
    'grant order, each with its own cgroup',
  );
});
