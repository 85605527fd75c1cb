import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';
import { memoryLogger } from '../support/memoryLogger';
import { Spool } from '../../agent/telemetry/spool';

let dir: string;
let blocker: string;

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quantilica-spool-fallback-'));
  // A path below a regular file cannot be created, as root or not (permissions would not stop root).
  blocker = path.join(dir, 'not-a-directory');
  fs.writeFileSync(blocker, 'x');
});
afterEach(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

const event = (i: number) => ({ runId: `run-${i}`, event: 'heartbeat' as const, task: 'fetcher', pool: 'heavy-io', payload: { i } });

test('spool path unwritable: the fallback path is used, and status says so', () => {
  const logger = memoryLogger();
  const fallbackPath = path.join(dir, 'fallback', 'quantilica_telemetry_spool.db');
  const spool = new Spool({ path: path.join(blocker, 'spool.db'), fallbackPath, logger });
  try {
    assert.ok(spool.emit(event(1)) !== null);
    const status = spool.status();
    assert.equal(status.path, fallbackPath);
    assert.equal(status.fallback, true);
    assert.equal(status.pending, 1);
    assert.equal(status.lost, 0);
    assert.match(status.error ?? '', /cannot be written/);
    assert.ok(fs.existsSync(fallbackPath));
    assert.ok(logger.records.some((r) => r.level === 'warn' && /cannot be written/.test(r.msg ?? '')));
  } finally {
    spool.close();
  }
});

test('both paths unwritable and no room in memory (heldMax 0): emit still returns, every loss is counted, shown in status and logged', () => {
  const logger = memoryLogger();
  const spool = new Spool({
    path: path.join(blocker, 'spool.db'),
    fallbackPath: path.join(blocker, 'fallback.db'),
    logger,
    lostLogEvery: 10,
    heldMax: 0,
  });
  try {
    for (let i = 0; i < 25; i += 1) assert.equal(spool.emit(event(i)), null);
    const status = spool.status();
    assert.equal(status.lost, 25);
    assert.equal(status.path, null);
    assert.equal(status.pending, 0);
    assert.match(status.error ?? '', /cannot be written/);
    const lossLogs = logger.records.filter((r) => r.level === 'error' && /event lost/.test(r.msg ?? ''));
    // Loudly, not once per event: the first loss, then every tenth.
    assert.deepEqual(
      lossLogs.map((r) => (r.obj as { lost: number }).lost),
      [1, 10, 20],
    );
  } finally {
    spool.close();
  }
});

test('a spool that could not be written starts storing again once its path can be written', () => {
  const logger = memoryLogger();
  const primary = path.join(blocker, 'spool.db');
  const spool = new Spool({ path: primary, fallbackPath: path.join(blocker, 'fallback.db'), logger, reopenIntervalMs: 0, heldMax: 0 });
  try {
    assert.equal(spool.emit(event(1)), null);
    fs.rmSync(blocker);
    assert.ok(spool.emit(event(2)) !== null);
    assert.deepEqual([spool.status().path, spool.status().pending, spool.status().lost], [primary, 1, 1]);
  } finally {
    spool.close();
  }
});
