import assert from 'node:assert/strict';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { memoryLogger } from '../support/memoryLogger';
import { RunStore } from '../../agent/runs/runStore';
import { makeTestEnv, runCli } from '../support/harness';

function asideOf(file: string): string[] {
  return fs.readdirSync(path.dirname(file)).filter((f) => f.startsWith(`${path.basename(file)}.corrupt-`) && !/-(wal|shm)$/.test(f));
}

test('a state.db of garbage: moved aside with a timestamp, a new one started, the command works and names the file', { timeout: 120_000 }, async (t) => {
  const station = makeTestEnv([{ name: 'quick', pool: 'network-light', argv: ['/bin/true'] }]);
  t.after(() => fs.rmSync(station.root, { recursive: true, force: true }));
  const stateDb = path.join(station.home, '.quantilica', 'state.db');
  fs.mkdirSync(path.dirname(stateDb), { recursive: true, mode: 0o700 });
  const garbage = crypto.randomBytes(32 * 1024);
  fs.writeFileSync(stateDb, garbage, { mode: 0o600 });

  const ran = await runCli(station, ['run', 'quick']);
  assert.equal(ran.code, 0, ran.stderr);
  assert.match(ran.stdout, /completed/);
  assert.ok(ran.stderr.includes(stateDb), `the message names the file: ${ran.stderr}`);
  assert.match(ran.stderr, /corrupt.*moved aside/);
  const aside = asideOf(stateDb);
  assert.equal(aside.length, 1);
  assert.deepEqual(fs.readFileSync(path.join(path.dirname(stateDb), aside[0])), garbage, 'the bad file is kept for a post-mortem');
  const runs = await runCli(station, ['runs']);
  assert.equal(runs.code, 0, runs.stderr);
  assert.match(runs.stdout, /quick/);
});

test('a state.db with a valid header and damaged pages ("malformed") is found at open and moved aside', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quantilica-state-'));
  try {
    const file = path.join(dir, 'state.db');
    const seed = new RunStore(file);
    seed.close();
    const db = new Database(file);
    db.exec(`CREATE TABLE filler (x TEXT);
      WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) INSERT INTO filler SELECT hex(randomblob(500)) FROM n;`);
    db.close();
    // Keep the 100-byte header, scribble over the pages after it.
    const fd = fs.openSync(file, 'r+');
    fs.writeSync(fd, crypto.randomBytes(8192), 0, 8192, 4096);
    fs.closeSync(fd);
    const logger = memoryLogger();
    const store = new RunStore(file, logger);
    try {
      assert.match(store.health().recovered ?? '', /state file .*state\.db was corrupt/);
      assert.equal(asideOf(file).length, 1);
      assert.deepEqual(store.recent(10), []);
      assert.ok(logger.records.some((r) => r.level === 'error' && (r.msg ?? '').includes(file)));
    } finally {
      store.close();
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
