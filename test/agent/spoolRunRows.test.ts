// The run rows of one group commit, on a real spool file: a run moved twice before the commit is
// written once, with its newest state, and every move's event is kept.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { toRunRow } from '../../agent/runs/runStore';
import { Spool } from '../../agent/telemetry/spool';
import type { NewTelemetryEvent, TelemetryEventKind } from '../../agent/telemetry/telemetrySink';
import { memoryLogger } from '../support/memoryLogger';
import { storedRun } from '../support/storedRun';

test('two moves of a run in one commit write its row once, with the newer state, and keep both events', async (t) => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-rows-'));
  const spool = new Spool({ path: path.join(root, 'spool.db'), logger: memoryLogger(), fallbackPath: path.join(root, 'fallback.db') });
  t.after(() => {
    spool.close();
    fs.rmSync(root, { recursive: true, force: true });
  });
  // Every row write the table sees, counted by the database itself.
  spool.withDatabase((db) =>
    db.exec(`
      CREATE TEMP TABLE row_writes (run_id TEXT);
      CREATE TEMP TRIGGER run_inserted AFTER INSERT ON runs BEGIN INSERT INTO row_writes VALUES (new.run_id); END;
      CREATE TEMP TRIGGER run_updated AFTER UPDATE ON runs BEGIN INSERT INTO row_writes VALUES (new.run_id); END;`),
  );
  const queued = storedRun({ runId: 'r1', fetcher: 'comex', status: 'waiting', startedAt: null, finishedAt: null, wait: null });
  const waiting = { ...queued, wait: { kind: 'pool' as const, position: 3 } };
  const other = storedRun({ runId: 'r2', fetcher: 'anac', status: 'waiting', startedAt: null, finishedAt: null });
  const event = (runId: string, kind: TelemetryEventKind): NewTelemetryEvent => ({
    runId,
    task: 'comex',
    pool: 'heavy-io',
    event: kind,
    payload: {},
  });
  // In one turn, as a queued run's enqueue and first wait come: one group commit holds all three.
  await Promise.all([
    spool.commit([toRunRow(queued)], [event('r1', 'waiting')]),
    spool.commit([toRunRow(other)], []),
    spool.commit([toRunRow(waiting)], [event('r1', 'heartbeat')]),
  ]);

  const rows = spool.withDatabase((db) => ({
    writes: db.prepare('SELECT run_id FROM row_writes ORDER BY rowid').pluck().all(),
    body: db.prepare("SELECT body FROM runs WHERE run_id = 'r1'").pluck().get() as string,
    events: db.prepare("SELECT event FROM event WHERE run_id = 'r1' ORDER BY seq").pluck().all(),
  }))!;
  assert.deepEqual([...(rows.writes as string[])].sort(), ['r1', 'r2'], 'one row write per run');
  assert.deepEqual((JSON.parse(rows.body) as { wait: unknown }).wait, { kind: 'pool', position: 3 }, 'the newer state');
  assert.deepEqual(rows.events, ['waiting', 'heartbeat'], 'both events, in order');
});
