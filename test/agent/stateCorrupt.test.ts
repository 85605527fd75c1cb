import assert from 'node:assert/strict';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { memoryLogger } from '../support/memoryLogger';
import { RunStore, toRunRow, type StoredRun } from '../../agent/runs/runStore';
import { Spool } from '../../agent/telemetry/spool';
import { makeTestEnv, runCli } from '../support/harness';

function asideOf(file: string): string[] {
  return fs.readdirSync(path.dirname(file)).filter((f) => f.startsWith(`${path.basename(file)}.corrupt-`) && !/-(wal|shm)$/.test(f));
}

test(
  'a state.db of garbage: moved aside with a timestamp, a new one started, the command works and names the file',
  { timeout: 120_000 },
  async (t) => {
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
  },
);

test('a state.db with a valid header and damaged pages ("malformed") is found at open and moved aside', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quantilica-state-'));
  try {
    const file = path.join(dir, 'state.db');
    const db = new Database(file);
    db.exec(`CREATE TABLE runs (run_id TEXT PRIMARY KEY, fetcher TEXT NOT NULL, status TEXT NOT NULL, enqueued_at TEXT NOT NULL,
        owner_pid INTEGER NOT NULL, owner_start_time INTEGER NOT NULL, body TEXT NOT NULL);
      CREATE TABLE filler (x TEXT);
      WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) INSERT INTO filler SELECT hex(randomblob(500)) FROM n;`);
    db.close();
    // Keep the 100-byte header, scribble over the pages after it.
    const fd = fs.openSync(file, 'r+');
    fs.writeSync(fd, crypto.randomBytes(8192), 0, 8192, 4096);
    fs.closeSync(fd);
    const logger = memoryLogger();
    const spool = new Spool({ path: path.join(dir, 'spool.db'), fallbackPath: path.join(dir, 'fb', 'f.db'), logger });
    try {
      const store = new RunStore(spool, file, logger);
      assert.match(store.health().recovered ?? '', /state file .*state\.db was corrupt/);
      assert.equal(asideOf(file).length, 1);
      assert.deepEqual(store.recent(10), []);
      assert.ok(logger.records.some((r) => r.level === 'error' && (r.msg ?? '').includes(file)));
    } finally {
      spool.close();
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a state.db of an earlier version is moved into the spool once: its runs are found there, the file is renamed .migrated', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quantilica-state-'));
  try {
    const file = path.join(dir, 'state.db');
    const old = new Database(file);
    old.exec(`CREATE TABLE runs (run_id TEXT PRIMARY KEY, fetcher TEXT NOT NULL, status TEXT NOT NULL, enqueued_at TEXT NOT NULL,
      owner_pid INTEGER NOT NULL, owner_start_time INTEGER NOT NULL, body TEXT NOT NULL)`);
    const run: StoredRun = {
      runId: 'r-old',
      fetcher: 'f',
      pool: 'heavy-io',
      status: 'running',
      trigger: 'cli',
      args: [],
      enqueuedAt: '2026-01-01T00:00:00.000Z',
      startedAt: '2026-01-01T00:00:01.000Z',
      finishedAt: null,
      slot: 0,
      pid: 123,
      exitCode: null,
      signal: null,
      reason: null,
      wait: null,
      logPath: null,
      startTime: 9,
      statusFile: '/x/r-old.exit',
      ownerPid: 1,
      ownerStartTime: 2,
    };
    old.prepare(`INSERT INTO runs VALUES (@runId, @fetcher, @status, @enqueuedAt, @ownerPid, @ownerStartTime, @body)`).run(toRunRow(run));
    old.close();
    const spoolPath = path.join(dir, 'spool.db');
    const spool = new Spool({ path: spoolPath, fallbackPath: path.join(dir, 'fb', 'f.db'), logger: memoryLogger() });
    try {
      const store = new RunStore(spool, file, memoryLogger());
      assert.equal(store.health().recovered, null);
      assert.deepEqual(
        store.active().map((r) => [r.runId, r.status, r.pid]),
        [['r-old', 'running', 123]],
      );
      assert.equal(fs.existsSync(file), false);
      assert.ok(fs.existsSync(`${file}.migrated`));
      // A second start finds nothing to move and keeps what it has.
      assert.equal(new RunStore(spool, file).get('r-old')?.statusFile, '/x/r-old.exit');
    } finally {
      spool.close();
    }
    const direct = new Database(spoolPath, { readonly: true });
    try {
      assert.equal(direct.prepare(`SELECT count(*) FROM runs`).pluck().get(), 1, 'the run is in the spool file itself');
    } finally {
      direct.close();
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
