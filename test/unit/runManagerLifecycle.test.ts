import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { StoredRun } from '../../agent/runs/runStore';
import { FINAL_STATES } from '../../shared/protocol';
import { IllegalMoveError, RUN_MOVES, transition } from '../../agent/runs/runTransitions';
import { fixedClock, FakeJournal, managerBed, settle } from '../support/runFakes';
import { waitFor } from '../support/waitFor';

function leftover(fields: Partial<StoredRun>): StoredRun {
  return {
    runId: 'r-left',
    fetcher: 'fetch',
    pool: 'heavy-io',
    status: 'waiting',
    trigger: 'schedule',
    args: [],
    enqueuedAt: '2026-01-01T00:00:00.000Z',
    startedAt: null,
    finishedAt: null,
    slot: null,
    pid: null,
    exitCode: null,
    signal: null,
    reason: null,
    wait: null,
    logPath: null,
    startTime: null,
    statusFile: null,
    ownerPid: 999_999,
    ownerStartTime: 1,
    ...fields,
  };
}

test('shutdown: waiting runs end cancelled (agent-stopping) in state and telemetry; a running run stays running for the next agent', async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  const running = await bed.running(0);
  const atGate = await bed.manager.enqueue('fetch', [], 'cli');
  const forSlot = await bed.pastGate();
  const waiter = bed.manager.waitRun(atGate.runId);
  await bed.manager.shutdown(false);
  for (const id of [atGate.runId, forSlot.runId]) {
    assert.equal(bed.journal.get(id)?.status, 'cancelled', `${id} is not left waiting in the store`);
    assert.equal(bed.journal.get(id)?.reason, 'agent-stopping');
    assert.deepEqual(bed.journal.eventsOf(id), ['finish'], 'telemetry says what happened');
  }
  assert.equal((await waiter).reason, 'agent-stopping', 'a waiting client learns it');
  assert.equal(bed.journal.get(running.runId)?.status, 'running');
  assert.deepEqual(bed.spawner.of(running.runId).signals, [], 'a running fetcher goes on');
  const commits = bed.journal.commits.length;
  bed.spawner.of(running.runId).exit({ exitCode: 0, signal: null });
  await settle();
  assert.equal(bed.journal.commits.length, commits, 'after shutdown the run belongs to the next agent: nothing more is recorded');
  await assert.rejects(bed.manager.enqueue('fetch', [], 'cli'), /stopping/);
});

test('shutdown with stopFetchers: running runs are terminated and end cancelled before it returns', async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  const run = await bed.running(0);
  const stopped = bed.manager.shutdown(true);
  await settle();
  const proc = bed.spawner.of(run.runId);
  assert.deepEqual(proc.signals, ['SIGTERM']);
  proc.exit({ exitCode: 143, signal: 'SIGTERM' });
  await stopped;
  assert.equal(bed.journal.get(run.runId)?.status, 'cancelled');
});

test('adoption of a waiting run whose owner is gone: it had not reached its spawn, so it fails (owner-exited-while-waiting)', async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  bed.journal.runs.set('r-left', leftover({ wait: { kind: 'pool', position: 2 } }));
  await bed.manager.adoptLeftovers();
  const left = bed.journal.get('r-left')!;
  assert.equal(left.status, 'failed');
  assert.equal(left.reason, 'owner-exited-while-waiting');
  assert.deepEqual(bed.journal.eventsOf('r-left'), ['finish']);
});

test('adoption of a run left `starting` whose process lives: adopted running, then finished with its exit', async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  bed.journal.runs.set('r-left', leftover({ reason: 'starting', slot: 1, statusFile: '/x/r-left.exit' }));
  bed.spawner.groups.set('r-left', 4242);
  await bed.manager.adoptLeftovers();
  const adopted = bed.manager.get('r-left')!;
  assert.equal(adopted.status, 'running');
  assert.equal(adopted.pid, 4242);
  assert.deepEqual(bed.journal.eventsOf('r-left'), ['start'], 'the start that was never recorded is');
  bed.spawner.adoptedExits.get('r-left')!({ exitCode: 0, signal: null });
  const done = await bed.manager.waitRun('r-left');
  assert.equal(done.status, 'completed');
  assert.equal(bed.journal.get('r-left')?.ownerPid, 11, 'the adopter owns it');
});

test('adoption of a run left `starting` that already ended: its status file finishes it', async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  bed.journal.runs.set('r-left', leftover({ reason: 'starting', slot: 1, statusFile: '/x/r-left.exit' }));
  bed.spawner.statusFiles.set('/x/r-left.exit', { exitCode: 5, signal: null, endedAt: new Date('2026-01-01T00:00:09.000Z') });
  await bed.manager.adoptLeftovers();
  const done = await bed.manager.waitRun('r-left');
  assert.equal(done.status, 'failed');
  assert.equal(done.exitCode, 5);
  assert.equal(done.finishedAt, '2026-01-01T00:00:09.000Z');
  assert.deepEqual(bed.journal.eventsOf('r-left'), ['start', 'finish']);
});

test('adoption leaves alone the runs of an owner that still lives', async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  bed.journal.runs.set('r-left', leftover({ ownerPid: 77 }));
  bed.spawner.liveOwners.add(77);
  await bed.manager.adoptLeftovers();
  assert.equal(bed.journal.get('r-left')?.status, 'waiting');
  assert.equal(bed.manager.isOwnRun('r-left'), false);
});

test('an illegal move is refused with a typed error and changes nothing', async () => {
  const journal = new FakeJournal();
  const published: unknown[] = [];
  const run = leftover({ status: 'completed', finishedAt: '2026-01-01T00:00:01.000Z' });
  const before = { ...run };
  assert.throws(
    () => transition({ journal, clock: fixedClock, publish: (r) => published.push(r) }, run, 'start'),
    (err: unknown) => {
      assert.ok(err instanceof IllegalMoveError);
      assert.equal(err.from, 'completed');
      assert.equal(err.move, 'start');
      return true;
    },
  );
  assert.deepEqual(run, before);
  assert.equal(journal.commits.length, 0);
  assert.equal(published.length, 0);
  // The table itself: final states are final, hibernation goes both ways.
  for (const [name, spec] of Object.entries(RUN_MOVES)) {
    for (const final of FINAL_STATES) assert.ok(!Object.keys(spec.from).includes(final), `${name} leaves ${final}`);
  }
  assert.deepEqual([RUN_MOVES.hibernate.to, RUN_MOVES.wake.to], ['waiting', 'running']);
  await transition(
    { journal, clock: fixedClock, publish: (r) => published.push(r) },
    leftover({ status: 'running', pid: 3, startedAt: '2026-01-01T00:00:00.000Z' }),
    'hibernate',
    { reason: 'hibernating', wait: { kind: 'hibernating', until: '2026-01-01T01:00:00.000Z' } },
  );
  // Telemetry names it: `hibernated` with the wake-up time.
  assert.deepEqual(
    journal.events.map((e) => [e.event, e.payload.until]),
    [['hibernated', '2026-01-01T01:00:00.000Z']],
  );
});

test('a shift in the pool queue is not a move: no commit per queued run, and the new positions are published together', async (t) => {
  const bed = managerBed();
  t.after(() => bed.close());
  const queued = [];
  for (let i = 0; i < 20; i++) queued.push(await bed.pastGate());
  // Entering the queue is a move (the run now waits for a slot): one commit each, with its event.
  bed.slots.reportPositions(5);
  await settle();
  for (const run of queued) assert.deepEqual(bed.journal.get(run.runId)?.wait, { kind: 'pool', position: queued.indexOf(run) + 6 });
  const commits = bed.journal.commits.length;
  const published = bed.published.length;
  // Three grants elsewhere shift the whole queue three times: nothing is committed for it...
  for (const ahead of [4, 3, 2]) bed.slots.reportPositions(ahead);
  await settle();
  assert.equal(bed.journal.commits.length, commits, 'no commit per shift of the queue');
  assert.equal(bed.published.length, published, 'not published one shift at a time');
  // ...and each queued run is published once, with its latest position, within a second.
  await waitFor(() => bed.published.length >= published + queued.length, { what: 'the positions to be published', timeoutMs: 5000 });
  const shown = bed.published.slice(published);
  assert.equal(shown.length, queued.length);
  for (const run of queued) {
    const info = shown.find((r) => r.runId === run.runId);
    assert.deepEqual(info?.wait, { kind: 'pool', position: queued.indexOf(run) + 3 });
    assert.deepEqual(
      bed.manager.get(run.runId)?.wait,
      { kind: 'pool', position: queued.indexOf(run) + 3 },
      'asked directly, a run tells its current position',
    );
  }
});
