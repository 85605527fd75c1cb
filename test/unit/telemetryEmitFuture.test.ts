import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { memoryLogger } from '../support/memoryLogger';
import { emitFromCli, MAX_FUTURE_SKEW_SECONDS } from '../../agent/telemetry/emitCommand';
import { Spool } from '../../agent/telemetry/spool';
import { makeTestEnv, runCli } from '../support/harness';

test('emit --at refuses a time more than the allowed skew in the future, stores nothing; a little skew is fine', (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quantilica-emit-future-'));
  const spool = new Spool({ path: path.join(dir, 'spool.db'), fallbackPath: path.join(dir, 'fb', 'spool.db'), logger: memoryLogger() });
  t.after(() => {
    spool.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const now = new Date('2030-01-01T00:00:00Z');
  const ahead = (s: number) => new Date(now.getTime() + s * 1000).toISOString();
  const refused = emitFromCli('finish', { runId: 'r', status: 'completed', at: ahead(MAX_FUTURE_SKEW_SECONDS + 1) }, spool, { now });
  assert.equal(refused.exitCode, 2);
  assert.match(refused.message, /--at: .* is in the future/);
  assert.equal(spool.pending(), 0);
  const skewed = emitFromCli('finish', { runId: 'r', status: 'completed', at: ahead(MAX_FUTURE_SKEW_SECONDS - 10) }, spool, { now });
  assert.equal(skewed.exitCode, 0, skewed.message);
  assert.equal(spool.pending(), 1);
});

test('`quantilica telemetry emit --at` a year ahead exits 64 with the message', async (t) => {
  const station = makeTestEnv(null);
  t.after(() => fs.rmSync(station.root, { recursive: true, force: true }));
  const nextYear = new Date(Date.now() + 365 * 24 * 3600 * 1000).toISOString();
  const r = await runCli(station, ['telemetry', 'emit', 'heartbeat', '--run-id', 'r1', '--at', nextYear]);
  assert.equal(r.code, 64, r.stderr);
  assert.match(r.stderr, /--at: .* is in the future/);
});
