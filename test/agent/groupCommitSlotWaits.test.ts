// A commit a held slot waits for (a run's spawn intent) does not sit out the group commit's window
// for more writers: it and what gathered go on the next turn; every other move still gathers.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { recordingGroupCommit } from '../support/recordingGroupCommit';
import { draft, transition, type TransitionPorts } from '../../agent/runs/runTransitions';
import type { RunJournal } from '../../agent/runs/runPorts';
import { storedRun } from '../support/storedRun';
import { fixedClock, settle } from '../support/runFakes';

/** Three turns of the event loop: far less than the window, more than a next-turn write needs. */
async function threeTurns(): Promise<void> {
  for (let i = 0; i < 3; i++) await settle();
}

test(
  'a writer added with nextTurn ends the gathering window: its write, with what gathered, goes on the next turn',
  { timeout: 20_000 },
  async () => {
    // A window far longer than the test's timeout: only nextTurn can end it in time.
    const { group, writes } = recordingGroupCommit<number>({ windowMs: 60_000, burstGapMs: 60_000 });
    await group.add(0);
    const gathered = group.add(1);
    await threeTurns();
    assert.deepEqual(writes, [[0]], 'a burst writer waits the window');
    await Promise.all([gathered, group.add(2, true)]);
    assert.deepEqual(writes, [[0], [1, 2]], 'the waiting writer and the one a slot waits for share the next turn’s write');

    // Writers after it gather again.
    const later = group.add(3);
    await threeTurns();
    assert.deepEqual(writes, [[0], [1, 2]], 'the next writer waits the window again');
    group.flushNow();
    await later;
    assert.deepEqual(writes, [[0], [1, 2], [3]]);
  },
);

test('of a run’s moves, only the spawn intent (markStarting) is committed as one a slot waits for', async () => {
  const flagged: Array<[string | null, boolean]> = [];
  const journal: RunJournal = {
    commit: (run, _event, slotWaits) => {
      flagged.push([run.reason ?? run.status, slotWaits === true]);
      return Promise.resolve();
    },
    record: () => Promise.resolve(),
    get: () => null,
    active: () => [],
  };
  const ports: TransitionPorts = { journal, clock: fixedClock, publish: () => {} };
  const run = draft(storedRun({ runId: 'r-slot', fetcher: 'comex', status: 'waiting', startedAt: null, finishedAt: null, slot: null }));
  await transition(ports, run, 'enqueue');
  await transition(ports, run, 'wait', { wait: { kind: 'pool', position: 1 } });
  await transition(ports, run, 'markStarting', { reason: 'starting', wait: null, slot: 0 });
  await transition(ports, run, 'start', { reason: null, startedAt: '2026-01-01T00:00:01.000Z' });
  await transition(ports, run, 'complete', { reason: null, exitCode: 0, finishedAt: '2026-01-01T00:00:02.000Z' });
  assert.deepEqual(flagged, [
    ['waiting', false],
    ['waiting', false],
    ['starting', true],
    ['running', false],
    ['completed', false],
  ]);
});
