import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import { memoryLogger } from '../support/memoryLogger';
import { RunStore } from '../../agent/runs/runStore';
import { FlushLock } from '../../agent/telemetry/flushLock';
import { fallbackSpoolDir } from '../../agent/telemetry/privateDir';
import { Spool } from '../../agent/telemetry/spool';
import { makeTestEnv, runCli } from '../support/harness';

// A throwaway unprivileged user, unique to this file, plays the other user of a shared station.
const ATTACKER = `qtplant${process.pid}`;
let uid = -1;
let gid = -1;
let base = '';
/** Stands for /tmp: world-writable with the sticky bit. */
let sharedTmp = '';

const asAttacker = (script: string) =>
  execFileSync('setpriv', ['--reuid', String(uid), '--regid', String(gid), '--clear-groups', 'sh', '-c', script], { stdio: 'pipe' });
const listing = (dir: string) =>
  fs
    .readdirSync(dir)
    .sort()
    .map((f) => {
      const st = fs.lstatSync(path.join(dir, f));
      return `${f}:${st.uid}:${(st.mode & 0o7777).toString(8)}:${st.size}:${st.mtimeMs}`;
    });

before(() => {
  execFileSync('useradd', ['--no-create-home', '--shell', '/usr/sbin/nologin', ATTACKER]);
  uid = Number(execFileSync('id', ['-u', ATTACKER]).toString());
  gid = Number(execFileSync('id', ['-g', ATTACKER]).toString());
  base = fs.mkdtempSync(path.join(os.tmpdir(), 'quantilica-planted-'));
  fs.chmodSync(base, 0o755);
  sharedTmp = path.join(base, 'tmp');
  fs.mkdirSync(sharedTmp);
  fs.chmodSync(sharedTmp, 0o1777);
});
after(() => {
  fs.rmSync(base, { recursive: true, force: true });
  execFileSync('userdel', [ATTACKER]);
});

/** The attacker makes the victim's fallback folder first, open to all, with a FIFO and a link in it. */
function plant(): string {
  const dir = path.join(sharedTmp, `quantilica-${process.getuid?.() ?? 0}`);
  asAttacker(
    `mkdir -m 777 ${dir} && mkfifo -m 666 ${dir}/quantilica_telemetry_spool.db && ln -s /etc/hostname ${dir}/quantilica_telemetry_spool.db-wal`,
  );
  return dir;
}

test(
  'the CLI refuses a fallback folder planted by another user in the shared tmp dir: nothing written there, no hang, a clear message',
  { timeout: 120_000 },
  async (t) => {
    const planted = plant();
    t.after(() => fs.rmSync(planted, { recursive: true, force: true }));
    const before = listing(planted);
    const station = makeTestEnv(null);
    t.after(() => fs.rmSync(station.root, { recursive: true, force: true }));
    // A folder where the spool file should be: its parent passes the start-up check, the file itself
    // cannot be opened, so the fallback would be used; TMPDIR stands for /tmp.
    const blocker = path.join(station.root, 'spool.db');
    fs.mkdirSync(blocker);
    const env: NodeJS.ProcessEnv = { ...station.env, TMPDIR: sharedTmp, QUANTILICA_TELEMETRY_SPOOL: blocker };
    delete env.XDG_RUNTIME_DIR;
    const started = Date.now();
    const r = await runCli(env, ['telemetry', 'emit', 'start', '--task', 'secret-args']);
    assert.ok(Date.now() - started < 60_000, 'no hang on the FIFO');
    assert.equal(r.code, 1, r.stdout + r.stderr);
    assert.match(r.stderr, /LOST/);
    assert.match(r.stderr, new RegExp(`${planted}.*owned by uid ${uid}, not by us`));
    assert.deepEqual(listing(planted), before, 'nothing in the planted folder changed');
  },
);

test('a Spool never uses a fallback folder of another user, nor one open to others; events wait in memory instead', (t) => {
  const planted = plant();
  t.after(() => fs.rmSync(planted, { recursive: true, force: true }));
  const before = listing(planted);
  const blocker = path.join(base, 'file');
  fs.writeFileSync(blocker, '');
  t.after(() => fs.rmSync(blocker, { force: true }));
  const logger = memoryLogger();
  const spool = new Spool({
    path: path.join(blocker, 'spool.db'),
    fallbackPath: path.join(planted, 'quantilica_telemetry_spool.db'),
    logger,
    closeWaitMs: 0,
  });
  try {
    assert.ok(spool.emit({ runId: 'r', event: 'start', task: 't', pool: 'p', payload: { argv: ['--token', 'secret'] } }) !== null);
    const status = spool.status();
    assert.equal(status.path, null);
    assert.equal(status.held, 1);
    assert.match(status.error ?? '', /owned by uid \d+, not by us/);
  } finally {
    spool.close();
  }
  assert.deepEqual(listing(planted), before);

  // Our own folder, but open to others: refused too (and left as it is).
  const wide = path.join(base, 'wide');
  fs.mkdirSync(wide, { mode: 0o755 });
  fs.chmodSync(wide, 0o755);
  const spool2 = new Spool({ path: path.join(blocker, 'spool.db'), fallbackPath: path.join(wide, 'spool.db'), logger, closeWaitMs: 0 });
  try {
    assert.match(spool2.status().error ?? '', /mode 755, not 700/);
    assert.deepEqual(fs.readdirSync(wide), []);
  } finally {
    spool2.close();
  }
});

test('XDG_RUNTIME_DIR is used only when it is ours and private', () => {
  const mine = path.join(base, 'runtime-mine');
  fs.mkdirSync(mine, { mode: 0o700 });
  assert.equal(fallbackSpoolDir({ XDG_RUNTIME_DIR: mine }), path.join(mine, 'quantilica'));
  const theirs = path.join(sharedTmp, 'runtime-theirs');
  asAttacker(`mkdir -m 700 ${theirs}`);
  const myUid = process.getuid?.() ?? 0;
  assert.equal(fallbackSpoolDir({ XDG_RUNTIME_DIR: theirs }), path.join(os.tmpdir(), `quantilica-${myUid}`));
  assert.equal(fallbackSpoolDir({}), path.join(os.tmpdir(), `quantilica-${myUid}`));
});

test('a FIFO or a symlink where a spool file should be is refused at once; our own files are 0600', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quantilica-private-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const logger = memoryLogger();
  const fifo = path.join(dir, 'fifo.db');
  execFileSync('mkfifo', [fifo]);
  const s1 = new Spool({ path: fifo, fallbackPath: path.join(dir, 'fb', 'f.db'), logger, closeWaitMs: 0 });
  try {
    assert.match(s1.status().error ?? '', /fifo\.db is not a regular file/);
    assert.equal(s1.status().path, path.join(dir, 'fb', 'f.db'), 'the private fallback took over');
  } finally {
    s1.close();
  }
  const linked = path.join(dir, 'linked.db');
  const victim = path.join(dir, 'victim');
  fs.writeFileSync(victim, 'precious');
  fs.symlinkSync(victim, `${linked}-wal`);
  const s2 = new Spool({ path: linked, fallbackPath: path.join(dir, 'fb', 'f.db'), logger, closeWaitMs: 0 });
  try {
    assert.match(s2.status().error ?? '', /linked\.db-wal is a symbolic link/);
  } finally {
    s2.close();
  }
  assert.equal(fs.readFileSync(victim, 'utf8'), 'precious');

  const own = path.join(dir, 'own', 'spool.db');
  const s3 = new Spool({ path: own, logger, fallbackPath: path.join(dir, 'fb', 'f.db') });
  const lock = FlushLock.tryAcquire(FlushLock.pathFor(own));
  const store = new RunStore(s3, null);
  try {
    s3.emit({ runId: 'r', event: 'start', task: 't', pool: 'p', payload: {} });
    await store.save({
      runId: 'r',
      fetcher: 'f',
      pool: 'p',
      status: 'running',
      trigger: 'cli',
      args: [],
      enqueuedAt: new Date().toISOString(),
      startedAt: null,
      finishedAt: null,
      slot: null,
      pid: null,
      exitCode: null,
      signal: null,
      reason: null,
      wait: null,
      logPath: null,
      startTime: null,
      statusFile: null,
      ownerPid: process.pid,
      ownerStartTime: 0,
    });
    assert.equal(store.get('r')?.status, 'running', 'the run state is in the spool file');
    for (const f of ['spool.db', 'spool.db-wal', 'spool.db-shm', 'spool.db.flush-lock']) {
      assert.equal(fs.statSync(path.join(dir, 'own', f)).mode & 0o777, 0o600, `${f} is 0600`);
    }
    assert.equal(fs.statSync(path.join(dir, 'fb')).mode & 0o777, 0o700, 'the fallback folder is 0700');
  } finally {
    lock?.release();
    s3.close();
  }
});
