import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { DiskStatus } from '../../shared/protocol';
import { startDiskSampler } from '../../agent/history/diskSampler';
import { HISTORY_RETENTION_MS, HistoryStore } from '../../agent/history/historyStore';
import { readLogBytes } from '../../agent/server/logFollow';
import { ManualClock } from '../support/manualClock';
import { removeAtExit } from '../support/removeAtExit';

function disk(freeGb: number): DiskStatus {
  return {
    state: 'ok',
    path: '/data',
    freeGb,
    totalGb: 100,
    warnGb: 10,
    pauseGb: 5,
    resumeGb: 8,
    next: null,
    error: null,
    checkedAt: new Date(0).toISOString(),
  };
}

test('disk samples stay within their retention over 3 simulated days (a sample every poll)', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-history-'));
  removeAtExit(dir);
  const clock = new ManualClock(new Date('2026-11-01T00:00:00Z'));
  const store = new HistoryStore(path.join(dir, 'history.db'), clock);
  let free = 50;
  const stop = startDiskSampler(store, () => disk(free), 60, clock);
  const perRetention = HISTORY_RETENTION_MS / 60_000;
  let maxCount = 0;
  for (let hour = 1; hour <= 72; hour++) {
    free -= 0.1;
    clock.advance(3600_000);
    const { count, oldestMs } = store.extent();
    maxCount = Math.max(maxCount, count);
    const now = clock.now().getTime();
    assert.ok(oldestMs !== null && oldestMs >= now - HISTORY_RETENTION_MS, `hour ${hour}: nothing older than the retention`);
    assert.ok(count <= perRetention + 1, `hour ${hour}: ${count} samples, at most ${perRetention + 1}`);
    if (hour <= 47) assert.equal(count, hour * 60 + 1, `hour ${hour}: every poll sampled so far`);
  }
  assert.equal(maxCount, perRetention + 1, 'the bound was reached and held');
  const day = store.diskSamples(clock.now().getTime() - 24 * 3600_000);
  assert.equal(day.length, 24 * 60 + 1);
  assert.ok(
    day.every((s, i) => i === 0 || s.at > (day[i - 1]?.at ?? '')),
    'oldest first',
  );
  stop();
  store.close();
  assert.equal(fs.statSync(path.join(dir, 'history.db')).mode & 0o777, 0o600);
});

test('a very short poll is bounded by the row cap', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-history-'));
  removeAtExit(dir);
  const clock = new ManualClock(new Date('2026-11-01T00:00:00Z'));
  const store = new HistoryStore(path.join(dir, 'history.db'), clock, HISTORY_RETENTION_MS, 500);
  const stop = startDiskSampler(store, () => disk(20), 0.2, clock);
  clock.advance(600_000);
  assert.equal(store.extent().count, 500);
  stop();
  store.close();
});

test('log reads are capped and never split a UTF-8 character', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-logread-'));
  removeAtExit(dir);
  const file = path.join(dir, 'run.log');
  fs.writeFileSync(file, 'aé€😀'.repeat(1000), { mode: 0o600 });
  let offset = 0;
  let text = '';
  while (offset < fs.statSync(file).size) {
    const chunk = readLogBytes(file, offset, 7);
    assert.ok(chunk.nextOffset - offset <= 7 && chunk.nextOffset > offset);
    text += chunk.text;
    offset = chunk.nextOffset;
  }
  assert.equal(text, 'aé€😀'.repeat(1000));
  fs.symlinkSync(file, path.join(dir, 'link.log'));
  assert.throws(() => readLogBytes(path.join(dir, 'link.log'), 0, 10), /ELOOP/);
});
