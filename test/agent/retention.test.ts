import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { demoFetch } from '../../agent/catalog/demoFetch';
import { memoryLogger } from '../support/memoryLogger';
import { Retention } from '../../agent/runs/retention';
import { RunStore, type StoredRun } from '../../agent/runs/runStore';
import { Spool } from '../../agent/telemetry/spool';
import { makeTestEnv, startAgent } from '../support/harness';
import { waitFor } from '../support/waitFor';

const DAY = 86400_000;

/** A file with a given age, as a run of `runId` would have left it. */
function leave(file: string, ageDays: number): string {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, 'x\n');
  const at = new Date(Date.now() - ageDays * DAY);
  fs.utimesSync(file, at, at);
  return file;
}

const id = (n: number) => `mx${String(n).padStart(6, '0')}-0123abcd`;

test("retention removes ended runs' logs and status files by age and by count, never those of active runs or foreign files", () => {
  const t = makeTestEnv(null);
  const logDir = path.join(t.root, 'logs');
  const statusDir = path.join(t.root, 'runs');
  const logs = Array.from({ length: 8 }, (_, i) => leave(path.join(logDir, `sidra-${id(i)}.log`), i));
  const old = leave(path.join(logDir, `anac-${id(20)}.log`), 30);
  const activeOld = leave(path.join(logDir, `anac-${id(21)}.log`), 30);
  const activeStatus = leave(path.join(statusDir, `${id(21)}.exit`), 30);
  const statusOld = leave(path.join(statusDir, `${id(22)}.exit`), 15);
  const statusNew = leave(path.join(statusDir, `${id(23)}.exit`), 1);
  const foreign = leave(path.join(logDir, 'notes.log'), 100);
  const retention = new Retention({ logDir, statusDir, days: 14, runs: 5, activeRunIds: () => new Set([id(21)]), logger: memoryLogger() });
  const removed = retention.apply();
  // Logs: the 30-day-old one by age, and sidra 5..7 beyond the newest five.
  assert.deepEqual(removed, { logs: 4, statusFiles: 1, runRows: 0 });
  assert.deepEqual(
    logs.map((f) => fs.existsSync(f)),
    [true, true, true, true, true, false, false, false],
  );
  assert.equal(fs.existsSync(old), false);
  assert.ok(fs.existsSync(activeOld), 'an active run keeps its log');
  assert.ok(fs.existsSync(activeStatus), 'an active run keeps its status file');
  assert.equal(fs.existsSync(statusOld), false);
  assert.ok(fs.existsSync(statusNew));
  assert.ok(fs.existsSync(foreign), 'files the agent did not make are left alone');
});

/** A run row as the run manager stores it, `ageDays` old (enqueued, started and ended then). */
function runRow(n: number, fetcher: string, status: StoredRun['status'], ageDays: number): StoredRun {
  const at = new Date(Date.now() - ageDays * DAY).toISOString();
  const ended = status !== 'waiting' && status !== 'running';
  return {
    runId: id(n),
    fetcher,
    pool: 'network-light',
    status,
    trigger: 'schedule',
    args: [],
    enqueuedAt: at,
    startedAt: status === 'waiting' ? null : at,
    finishedAt: ended ? at : null,
    slot: null,
    pid: null,
    exitCode: ended ? 0 : null,
    signal: null,
    reason: null,
    wait: null,
    logPath: null,
    startTime: null,
    statusFile: null,
    ownerPid: 1,
    ownerStartTime: 1,
  };
}

test("retention prunes ended runs' rows with their logs (by age and count), keeps active runs, each fetcher's last run and the telemetry", async () => {
  const t = makeTestEnv(null);
  const spool = new Spool({ path: path.join(t.root, 'spool.db'), logger: memoryLogger() });
  try {
    const store = new RunStore(spool, null);
    const rows = [
      ...Array.from({ length: 6 }, (_, i) => runRow(i, 'sidra', 'completed', i * 0.5)), // ids 0..5, newest first
      runRow(10, 'anac', 'failed', 30), // old, but anac's newest started run: kept for the schedule
      runRow(11, 'anac', 'completed', 40), // old: removed
      runRow(12, 'ibge', 'running', 50), // still running: kept
      runRow(13, 'ibge', 'waiting', 50), // still waiting: kept
      runRow(14, 'ibge', 'cancelled', 60), // old, not ibge's newest start (12 is): removed
    ];
    for (const r of rows) await store.save(r);
    for (const r of rows) spool.emit({ runId: r.runId, event: 'finish', task: r.fetcher, pool: r.pool, payload: {} });
    await store.save({ ...rows[0] }); // the emits reach the file with this commit
    const eventsBefore = spool.withDatabase((db) => (db.prepare('SELECT count(*) AS n FROM event').get() as { n: number }).n);
    // Five ended runs at most, fourteen days: sidra 5 goes by count, anac 11 and ibge 14 by age.
    const retention = new Retention({
      logDir: path.join(t.root, 'logs'),
      statusDir: path.join(t.root, 'runs'),
      days: 14,
      runs: 5,
      activeRunIds: () => new Set(),
      runRows: store,
      logger: memoryLogger(),
    });
    const removed = retention.apply();
    const left = new Set(store.recent(100).map((r) => r.runId));
    assert.deepEqual(
      [...left].sort(),
      [id(0), id(1), id(2), id(3), id(4), id(10), id(12), id(13)].sort(),
      `rows left: ${[...left].join(', ')}`,
    );
    assert.equal(removed.runRows, rows.length - left.size);
    assert.equal(store.lastStartedAt('anac')?.toISOString(), rows[6].startedAt, 'each fetcher keeps its last run for the schedule');
    const eventsAfter = spool.withDatabase((db) => (db.prepare('SELECT count(*) AS n FROM event').get() as { n: number }).n);
    assert.ok(eventsBefore !== null && eventsBefore >= rows.length, `the events were spooled (${eventsBefore})`);
    assert.equal(eventsAfter, eventsBefore, 'telemetry is kept');
    // Applied again, it has nothing more to remove; an id another process runs keeps its row too.
    assert.equal(retention.apply().runRows, 0);
    const guarded = new Retention({
      logDir: path.join(t.root, 'logs'),
      statusDir: path.join(t.root, 'runs'),
      days: 0.001,
      runs: 1,
      activeRunIds: () => new Set([id(1)]),
      runRows: store,
      logger: memoryLogger(),
    });
    guarded.apply();
    assert.ok(store.get(id(1)), 'an active id keeps its row');
    assert.equal(store.get(id(2)), null, 'an ended row beyond the count is removed');
    assert.ok(store.get(id(0)), "sidra's newest run stays");
  } finally {
    spool.close();
  }
});

test('the agent applies retention at start (QUANTILICA_RETENTION_DAYS, QUANTILICA_RETENTION_RUNS)', { timeout: 60000 }, async () => {
  const t = makeTestEnv([{ name: 'quick', pool: 'network-light', argv: ['true'] }], {
    QUANTILICA_RETENTION_DAYS: '2',
    QUANTILICA_RETENTION_RUNS: '3',
  });
  const logDir = path.join(t.dataDir, 'logs');
  const statusDir = path.join(t.home, '.quantilica', 'runs');
  const stale = [leave(path.join(logDir, `quick-${id(1)}.log`), 3), leave(path.join(statusDir, `${id(1)}.exit`), 3)];
  const recent = Array.from({ length: 4 }, (_, i) => leave(path.join(logDir, `quick-${id(10 + i)}.log`), i * 0.1));
  const agent = await startAgent(t);
  try {
    await waitFor(() => stale.every((f) => !fs.existsSync(f)), { what: 'files older than 2 days to be removed' });
    await waitFor(() => !fs.existsSync(recent[3]), { what: 'the fourth-newest log to be removed' });
    assert.deepEqual(
      recent.slice(0, 3).map((f) => fs.existsSync(f)),
      [true, true, true],
    );
  } finally {
    agent.child.kill('SIGTERM');
    await new Promise((resolve) => agent.child.once('exit', resolve));
  }
});

test('the demo fetcher keeps the last five data files of its source and removes the older ones', async () => {
  const t = makeTestEnv(null);
  const dir = path.join(t.dataDir, 'sidra');
  const older = Array.from({ length: 6 }, (_, i) => leave(path.join(dir, `2020-01-0${i + 1}T00-00-00-000Z-${100 + i}.bin`), 0));
  const other = leave(path.join(dir, 'keep-me.csv'), 0);
  const code = await demoFetch('sidra', 0.2, 0.01, t.dataDir);
  assert.equal(code, 0);
  const bins = fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.bin'))
    .sort();
  assert.equal(bins.length, 5, bins.join(', '));
  assert.deepEqual(
    older.map((f) => fs.existsSync(f)),
    [false, false, true, true, true, true],
  );
  assert.ok(fs.existsSync(other));
});
