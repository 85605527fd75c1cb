// A run read by its id (a client waiting for it, a cancel): while its moves wait for the group
// commit, the newest of them; once written, the file's row, also through a spool opened again.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { RunStore, toRunRow } from '../../agent/runs/runStore';
import { Spool } from '../../agent/telemetry/spool';
import { memoryLogger } from '../support/memoryLogger';
import { removeAtExit } from '../support/removeAtExit';
import { storedRun } from '../support/storedRun';

test('a run read while its moves wait for the commit is its newest move; once written, the row, also after the spool reopens', async (t) => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-get-'));
  // At exit, not in an after hook: the hooks run in order, and the reopened spool's close comes later.
  removeAtExit(root);
  const file = path.join(root, 'spool.db');
  const open = () => new Spool({ path: file, logger: memoryLogger(), fallbackPath: path.join(root, 'fallback.db') });

  const spool = open();
  const store = new RunStore(spool, null);
  const queued = storedRun({ runId: 'r1', fetcher: 'comex', status: 'waiting', startedAt: null, finishedAt: null, slot: null });
  const starting = { ...queued, reason: 'starting' as const, slot: 2 };
  const running = { ...starting, status: 'running' as const, reason: null, startedAt: '2026-01-01T00:00:01.000Z', pid: 4242 };
  const other = storedRun({ runId: 'r2', fetcher: 'anac', status: 'waiting', startedAt: null, finishedAt: null });
  // Three moves of r1 and one of r2 in one turn: one group commit holds them all, none is written yet.
  const committed = Promise.all([
    spool.commit([toRunRow(queued)], []),
    spool.commit([toRunRow(other)], []),
    spool.commit([toRunRow(starting)], []),
    spool.commit([toRunRow(running)], []),
  ]);
  assert.equal(
    spool.withDatabase((db) => db.prepare('SELECT count(*) FROM runs').pluck().get()),
    0,
    'nothing written yet',
  );
  assert.deepEqual(store.get('r1'), running, 'the newest of the queued moves');
  assert.deepEqual(store.get('r2'), other);
  assert.equal(store.get('r3'), null, 'a run nobody recorded');
  await committed;

  const finished = { ...running, status: 'completed' as const, finishedAt: '2026-01-01T00:00:02.000Z', exitCode: 0 };
  await spool.commit([toRunRow(finished)], []);
  for (let read = 0; read < 3; read++) assert.deepEqual(store.get('r1'), finished, `read ${read + 1} from the file`);
  spool.close();

  // A new connection: a statement prepared on the closed one must not be used (it would throw).
  const again = open();
  t.after(() => again.close());
  const reopened = new RunStore(again, null);
  assert.deepEqual(reopened.get('r1'), finished);
  assert.deepEqual(reopened.get('r2'), other);
  assert.equal(reopened.get('r3'), null);
});
