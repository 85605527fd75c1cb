import assert from 'node:assert/strict';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { memoryLogger } from '../support/memoryLogger';
import { Flusher } from '../../agent/telemetry/flusher';
import { Spool } from '../../agent/telemetry/spool';
import { eventIdsIn, tempSpool, usePostgres } from '../fixtures/telemetryTestBed';

const pgdb = usePostgres();

const event = (i: number) => ({ runId: 'run-corrupt', event: 'heartbeat' as const, task: 'fetcher', pool: 'heavy-io', payload: { i } });

function asideFiles(spoolPath: string): string[] {
  const base = path.basename(spoolPath);
  return fs.readdirSync(path.dirname(spoolPath)).filter((f) => f.startsWith(`${base}.corrupt-`) && !f.endsWith('-wal'));
}

test('a spool file of garbage bytes is moved aside with a timestamp, a new one starts, events flow to PostgreSQL', async () => {
  const bed = tempSpool();
  bed.spool.close();
  const garbage = crypto.randomBytes(64 * 1024);
  fs.writeFileSync(bed.spoolPath, garbage);
  const logger = memoryLogger();
  const spool = new Spool({ path: bed.spoolPath, logger, fallbackPath: path.join(bed.dir, 'fallback.db') });
  const flusher = new Flusher({ spool, databaseUrl: pgdb.url, logger });
  try {
    const aside = asideFiles(bed.spoolPath);
    assert.equal(aside.length, 1);
    assert.match(aside[0], /\.corrupt-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$/);
    assert.deepEqual(fs.readFileSync(path.join(bed.dir, aside[0])), garbage, 'the bad file is kept for a post-mortem');
    const status = spool.status();
    assert.equal(status.path, bed.spoolPath);
    assert.equal(status.fallback, false);
    assert.match(status.error ?? '', /corrupt/);
    assert.ok(logger.records.some((r) => r.level === 'error' && /corrupt/.test(r.msg ?? '')));

    const ids = [spool.emit(event(1)), spool.emit(event(2))];
    const result = await flusher.flushNow();
    assert.equal(result.error, null);
    assert.equal(result.sent, 2);
    const stored = new Set(await eventIdsIn(pgdb.client));
    for (const id of ids) assert.ok(id !== null && stored.has(id));
  } finally {
    await flusher.close();
    spool.close();
    bed.cleanup();
  }
});

test('a spool with a valid header but garbage pages is moved aside; new events are kept', () => {
  const bed = tempSpool();
  try {
    for (let i = 0; i < 200; i += 1) bed.spool.emit(event(i));
    bed.spool.close();
    // Keep the header, ruin everything after it (the WAL was checkpointed into the file by close()).
    const size = fs.statSync(bed.spoolPath).size;
    const fd = fs.openSync(bed.spoolPath, 'r+');
    fs.writeSync(fd, crypto.randomBytes(size - 100), 0, size - 100, 100);
    fs.closeSync(fd);
    const logger = memoryLogger();
    const spool = new Spool({ path: bed.spoolPath, logger, fallbackPath: path.join(bed.dir, 'fallback.db') });
    try {
      const id = spool.emit(event(1_000));
      assert.ok(id !== null, 'the event is stored in the new spool');
      assert.equal(asideFiles(bed.spoolPath).length, 1);
      const status = spool.status();
      assert.equal(status.lost, 0);
      assert.equal(status.pending, 1);
      assert.match(status.error ?? '', /corrupt/);
    } finally {
      spool.close();
    }
  } finally {
    bed.cleanup();
  }
});
