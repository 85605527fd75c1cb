import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';
import { memoryLogger } from '../support/memoryLogger';
import { emitFromCli } from '../../agent/telemetry/emitCommand';
import { Spool } from '../../agent/telemetry/spool';

let dir: string;
let spool: Spool;

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quantilica-emit-'));
  spool = new Spool({ path: path.join(dir, 'spool.db'), fallbackPath: path.join(dir, 'fallback.db'), logger: memoryLogger() });
});
afterEach(() => {
  spool.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

test('emit start without a run id makes one, stores the event and says where', () => {
  const result = emitFromCli('start', { task: 'ibge_pnad', pool: 'heavy-io' }, spool);
  assert.equal(result.exitCode, 0, result.message);
  assert.match(result.runId ?? '', /^[0-9a-f-]{36}$/);
  assert.match(result.message, /spooled in .*spool\.db/);
  const [stored] = spool.readBatch(10);
  assert.deepEqual(
    [stored.eventId, stored.runId, stored.event, stored.task, stored.pool],
    [result.eventId, result.runId, 'start', 'ibge_pnad', 'heavy-io'],
  );
  assert.equal((JSON.parse(stored.payload) as { host: string }).host, os.hostname());
});

test('emit finish carries status, exit code, duration and the given time', () => {
  const result = emitFromCli(
    'finish',
    {
      runId: 'r1',
      task: 't',
      status: 'failed',
      exitCode: '3',
      duration: '12.5',
      signal: 'SIGKILL',
      reason: 'oom',
      at: '2025-01-31T12:00:00Z',
    },
    spool,
  );
  assert.equal(result.exitCode, 0, result.message);
  const [stored] = spool.readBatch(10);
  assert.equal(stored.at, '2025-01-31T12:00:00.000Z');
  assert.deepEqual(JSON.parse(stored.payload), {
    source: 'cli',
    status: 'failed',
    exitCode: 3,
    signal: 'SIGKILL',
    reason: 'oom',
    durationSeconds: 12.5,
  });
});

test('bad input: a clear message naming the option, exit code 2, nothing stored', () => {
  const cases: Array<[string, Parameters<typeof emitFromCli>[1], RegExp]> = [
    ['stop', { runId: 'r' }, /unknown event "stop"; allowed: start, heartbeat, finish/],
    ['start', {}, /--task: Required/],
    ['heartbeat', { task: 't' }, /--run-id: Required/],
    ['finish', { runId: 'r' }, /--status: Required/],
    ['finish', { runId: 'r', status: 'done' }, /--status: Invalid enum value.*'completed' \| 'failed' \| 'cancelled'/],
    ['finish', { runId: 'r', status: 'failed', exitCode: 'one' }, /--exit-code: must be a whole number/],
    ['finish', { runId: 'r', status: 'failed', exitCode: '1.5' }, /--exit-code/],
    ['finish', { runId: 'r', status: 'completed', duration: '-3' }, /--duration: must be a number of seconds/],
    ['heartbeat', { runId: 'r', at: 'yesterday' }, /--at: must be an ISO-8601 time/],
    ['heartbeat', { runId: '   ' }, /--run-id: must not be empty/],
  ];
  for (const [kind, options, message] of cases) {
    const result = emitFromCli(kind, options, spool);
    assert.equal(result.exitCode, 2, `${kind} ${JSON.stringify(options)}`);
    assert.match(result.message, message);
  }
  assert.equal(spool.pending(), 0);
});

test('an event the spool cannot store: exit code 1 and LOST in the message', () => {
  const blocker = path.join(dir, 'file');
  fs.writeFileSync(blocker, '');
  const lossy = new Spool({ path: path.join(blocker, 'a.db'), fallbackPath: path.join(blocker, 'b.db'), logger: memoryLogger() });
  try {
    const result = emitFromCli('heartbeat', { runId: 'r' }, lossy, { heldWaitMs: 300 });
    assert.equal(result.exitCode, 1);
    assert.match(result.message, /LOST/);
    assert.equal(lossy.status().lost, 1);
  } finally {
    lossy.close();
  }
});
