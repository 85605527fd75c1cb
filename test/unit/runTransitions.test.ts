import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RUN_REASONS, type RunReason, type RunStatus } from '../../shared/protocol';
import { runEventId } from '../../agent/runs/runEventId';
import type { StoredRun } from '../../agent/runs/runStore';
import {
  draft,
  IllegalMoveError,
  note,
  RUN_MOVES,
  transition,
  type DurableMove,
  type ProgressMove,
  type RunFields,
  type RunMove,
  type TransitionPorts,
} from '../../agent/runs/runTransitions';
import { FakeJournal, fixedClock } from '../support/runFakes';

function stored(status: RunStatus, reason: RunReason | null, fields: Partial<StoredRun> = {}): StoredRun {
  return {
    runId: 'r-1',
    fetcher: 'fetch',
    pool: 'heavy-io',
    status,
    trigger: 'cli',
    args: [],
    enqueuedAt: '2026-01-01T00:00:00.000Z',
    startedAt: status === 'running' ? '2026-01-01T00:00:01.000Z' : null,
    finishedAt: null,
    slot: null,
    pid: status === 'running' ? 41 : null,
    exitCode: null,
    signal: null,
    reason,
    wait: null,
    logPath: null,
    startTime: null,
    statusFile: null,
    ownerPid: 7,
    ownerStartTime: 1,
    attempt: 1,
    ...fields,
  };
}

function bed(): { journal: FakeJournal; published: unknown[]; ports: TransitionPorts } {
  const journal = new FakeJournal();
  const published: unknown[] = [];
  return { journal, published, ports: { journal, clock: fixedClock, publish: (run) => published.push(run) } };
}

const PROGRESS: readonly RunMove[] = Object.entries(RUN_MOVES)
  .filter(([, spec]) => 'durable' in spec)
  .map(([name]) => name as RunMove);

/** Makes the move through the function its kind goes through. */
function make(ports: TransitionPorts, run: StoredRun, name: RunMove, fields: RunFields = {}): Promise<void> {
  if (PROGRESS.includes(name)) {
    note(run, name as ProgressMove, fields);
    return Promise.resolve();
  }
  return transition(ports, run, name as DurableMove, fields);
}

function refusedUnchanged(name: RunMove, run: StoredRun, fields: RunFields = {}): void {
  const { journal, published, ports } = bed();
  const before = { ...run };
  assert.throws(
    () => make(ports, run, name, fields),
    IllegalMoveError,
    `${name} from ${run.status} (${String(run.reason)}) with ${JSON.stringify(fields)}`,
  );
  assert.deepEqual(run, before, `${name} changed the run it refused`);
  assert.equal(journal.commits.length + published.length, 0);
}

// Written out by hand, not read from the table: what each move must refuse.
const REFUSALS: Array<[RunMove, StoredRun, RunFields]> = [
  ['enqueue', stored('waiting', null), {}],
  ['skip', stored('running', null), { reason: 'already-active' }],
  ['wait', stored('waiting', 'starting'), { wait: { kind: 'pool', position: 2 } }],
  ['wait', stored('waiting', 'retry-backoff'), { wait: { kind: 'pool', position: 2 } }],
  ['shift', stored('running', null), { wait: { kind: 'pool', position: 2 } }],
  ['markStarting', stored('waiting', 'retry-backoff'), { reason: 'starting' }],
  ['markStarting', stored('waiting', null), { reason: null }],
  ['spawned', stored('waiting', null), { pid: 5 }],
  ['start', stored('running', null), { reason: null }],
  ['start', stored('waiting', 'hibernating'), { reason: null }],
  ['start', stored('waiting', 'starting'), { reason: 'lingering' }],
  ['linger', stored('running', 'timeout'), { reason: 'lingering' }],
  ['linger', stored('waiting', null), { reason: 'lingering' }],
  ['lingerOn', stored('running', null), { reason: 'lingering' }],
  ['hibernate', stored('waiting', null), { reason: 'hibernating' }],
  ['hibernate', stored('running', null), { reason: 'retry-backoff' }],
  ['awaitStorage', stored('waiting', null), { reason: 'hibernating' }],
  ['awaitStorage', stored('running', null), { reason: 'retry-backoff' }],
  ['wake', stored('waiting', null), { reason: null }],
  ['retryWait', stored('waiting', null), { reason: 'retry-backoff' }],
  ['retryWait', stored('running', null), { reason: 'exit-code' }],
  ['retryWake', stored('waiting', null), { reason: null }],
  ['deadline', stored('waiting', null), { reason: 'timeout' }],
  ['deadline', stored('running', null), { reason: 'stalled' }],
  ['stall', stored('running', null, { stalledSince: '2026-01-01T00:00:02.000Z' }), {}],
  ['unstall', stored('running', null), {}],
  ['logGrew', stored('waiting', null), {}],
  ['askCancel', stored('waiting', null), { cancelAsked: true }],
  ['askCancel', stored('running', null, { cancelAsked: true }), { cancelAsked: true }],
  ['stallCancel', stored('running', 'timeout'), { reason: 'stalled' }],
  ['resume', stored('waiting', 'starting'), {}],
  ['resume', stored('waiting', 'hibernating'), {}],
  ['adopt', stored('waiting', null), {}],
  ['adoptHibernating', stored('running', null), {}],
  ['park', stored('waiting', null), { reason: null }],
  ['park', stored('waiting', 'starting'), { reason: 'starting' }],
  ['complete', stored('waiting', null), { reason: null }],
  ['complete', stored('running', null), { reason: 'lingering' }],
  ['fail', stored('failed', 'exit-code'), { reason: 'exit-code' }],
  ['fail', stored('running', null), { reason: 'starting' }],
  ['cancel', stored('completed', null), { reason: 'cancelled' }],
  ['cancel', stored('waiting', null), { reason: 'retry-backoff' }],
];

test('each move is refused from a state it may not leave and with a reason it does not carry, changing nothing', () => {
  for (const [name, run, fields] of REFUSALS) refusedUnchanged(name, run, fields);
  // Every move is refused somewhere above.
  assert.deepEqual(new Set(REFUSALS.map(([name]) => name)), new Set(Object.keys(RUN_MOVES)));
});

test('no move leaves a final state, and no move but enqueue and skip takes a draft', () => {
  for (const name of Object.keys(RUN_MOVES) as RunMove[]) {
    for (const status of ['completed', 'failed', 'cancelled', 'skipped'] as const) {
      for (const reason of [null, ...RUN_REASONS]) refusedUnchanged(name, stored(status, reason));
    }
    if (name !== 'enqueue' && name !== 'skip') refusedUnchanged(name, draft(stored('waiting', null)));
  }
});

test('a move the table allows changes the state, commits it with its event and publishes it once', async () => {
  const { journal, published, ports } = bed();
  const run = draft(stored('waiting', null));
  await transition(ports, run, 'enqueue');
  await transition(ports, run, 'wait', { wait: { kind: 'pool', position: 3 } });
  note(run, 'shift', { wait: { kind: 'pool', position: 2 } });
  await transition(ports, run, 'markStarting', { reason: 'starting', wait: null, slot: 1 });
  note(run, 'spawned', { pid: 12 });
  await transition(ports, run, 'start', { reason: null, startedAt: '2026-01-01T00:00:03.000Z' }, { argv: ['/bin/true'] });
  await transition(ports, run, 'linger', { reason: 'lingering' }, { lingering: [13] });
  await transition(ports, run, 'lingerOn', { reason: 'lingering' }, { lingering: [14] });
  await transition(ports, run, 'complete', { reason: null, exitCode: 0, finishedAt: '2026-01-01T00:00:05.000Z' });
  assert.deepEqual(journal.statesOf('r-1'), [
    'waiting',
    'waiting',
    'waiting(starting)',
    'running',
    'running(lingering)',
    'running(lingering)',
    'completed',
  ]);
  assert.deepEqual(
    journal.events.map((e) => e.event),
    ['waiting', 'start', 'heartbeat', 'finish'],
  );
  assert.equal(published.length, journal.commits.length, 'progress moves neither commit nor publish');
  const [waiting, start, heartbeat, finish] = journal.events;
  assert.deepEqual(waiting.payload, { trigger: 'cli', args: [], reason: { kind: 'pool', position: 3 } });
  assert.equal(start.eventId, runEventId('r-1', 'start'));
  assert.deepEqual([start.payload.pid, start.payload.slot, start.payload.argv], [12, 1, ['/bin/true']]);
  assert.deepEqual(heartbeat.payload, { pid: 12, logGrewAt: null, lingering: [13] });
  assert.equal(finish.eventId, runEventId('r-1', 'finish'));
  assert.deepEqual(finish.payload, {
    status: 'completed',
    exitCode: 0,
    signal: null,
    durationSeconds: 2,
    reason: null,
    message: null,
    attempt: 1,
  });
});

test('a hibernating sync wakes with `resumed`; a later try starts with its own event id', async () => {
  const { journal, ports } = bed();
  const sync = stored('running', null, { slot: 2 });
  await transition(ports, sync, 'hibernate', {
    slot: null,
    reason: 'hibernating',
    wait: { kind: 'hibernating', until: '2026-01-01T01:00:00.000Z' },
  });
  await transition(ports, sync, 'wake', { slot: 0, reason: null, wait: null }, { syncId: 4 });
  const retried = stored('running', null, { attempt: 1 });
  await transition(ports, retried, 'retryWait', {
    reason: 'retry-backoff',
    wait: { kind: 'retry', until: '2026-01-01T00:10:00.000Z', attempt: 2 },
    exitCode: 3,
  });
  await transition(ports, retried, 'retryWake', { reason: null, wait: null, attempt: 2 });
  await transition(ports, retried, 'markStarting', { reason: 'starting' });
  await transition(ports, retried, 'start', { reason: null });
  assert.deepEqual(
    journal.events.map((e) => [e.event, e.eventId ?? null]),
    [
      ['hibernated', null],
      ['resumed', null],
      ['waiting', null],
      ['start', runEventId('r-1', 'start-2')],
    ],
  );
  assert.deepEqual(journal.events[1].payload, { slot: 0, syncId: 4 });
});
