import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { isFinalStatus, RUN_STATUSES, type RunInfo, type RunStatus, type Snapshot } from '../../shared/protocol';
import { applyChange, MAX_FINISHED_RUNS } from '../../shared/stateTracker';

/** The rule, spelled the plain way: the changed run first, its older copy out, finished runs past the cap out. */
function expectedRuns(before: readonly RunInfo[], changed: RunInfo): string[] {
  const runs = [changed, ...before.filter((r) => r.runId !== changed.runId)];
  let finished = 0;
  return runs.filter((r) => !isFinalStatus(r.status) || ++finished <= MAX_FINISHED_RUNS).map((r) => `${r.runId}:${r.status}`);
}

function run(runId: string, status: RunStatus): RunInfo {
  return { runId, fetcher: 'comex', pool: 'heavy-io', status, trigger: 'protocol', args: [] } as unknown as RunInfo;
}

/** A small deterministic generator (xorshift), so a failure can be replayed from its seed. */
function random(seed: number): () => number {
  let x = seed;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

test('the run list after each change is the plain rule’s, over long random sequences (also from a snapshot over the cap)', () => {
  for (const seed of [1, 7, 42, 2026]) {
    const next = random(seed);
    // An agent's snapshot may hold more finished runs than a client keeps.
    const start = Array.from({ length: MAX_FINISHED_RUNS + 30 }, (_, i) =>
      run(`r${i}`, i % 3 === 0 ? 'waiting' : RUN_STATUSES[Math.floor(next() * RUN_STATUSES.length)]),
    );
    let s = { version: 0, runs: start, pools: [] } as unknown as Snapshot;
    for (let v = 1; v <= 3000; v++) {
      const changed = run(`r${Math.floor(next() * 400)}`, RUN_STATUSES[Math.floor(next() * RUN_STATUSES.length)]);
      const before = s.runs;
      const beforeIds = before.map((r) => `${r.runId}:${r.status}`);
      const want = expectedRuns(before, changed);
      s = applyChange(s, { version: v, change: { kind: 'run', run: changed } });
      assert.deepEqual(
        s.runs.map((r) => `${r.runId}:${r.status}`),
        want,
        `seed ${seed}, change ${v}`,
      );
      assert.deepEqual(
        before.map((r) => `${r.runId}:${r.status}`),
        beforeIds,
        'the list before is left untouched',
      );
    }
  }
});
