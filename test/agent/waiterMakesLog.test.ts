import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { NativeSpawner, encodeRequest } from '../../agent/runs/nativeSpawner';
import { processSpawner } from '../../agent/runs/processSpawner';
import type { SpawnOptions } from '../../agent/runs/runProcess';
import { openLogDir, openMadeLog } from '../../agent/runs/runLogFile';
import { UnsafeStationError } from '../../agent/station/unsafeStationError';
import { distFile } from '../../agent/paths';
import { memoryLogger } from '../support/memoryLogger';
import { tryLockSlot } from '../support/tryLockSlot';

// A first try's log is made by the run's waiter (make_log in quantilica-spawner.c), in the log folder
// the agent opened and checked, with the agent's own rules: never an existing name, never through a
// link, 0600 whatever the umask.
const BINARY = distFile('quantilica-spawner');

/** A station's folders, a held slot and the checked log folder's descriptor, as runStart has them for a spawn. */
function station() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-waiter-log-'));
  const logs = path.join(dir, 'logs');
  fs.mkdirSync(logs, { mode: 0o700 });
  const lockPath = path.join(dir, 'slot_0.lock');
  fs.writeFileSync(lockPath, '', { mode: 0o600 });
  const lock = tryLockSlot(lockPath);
  assert.ok(lock);
  const dirFd = openLogDir(logs, 'DATA_DIR');
  return {
    dir,
    logs,
    dirFd,
    /** The spawn of `script` with its log `name` left to the spawner. */
    spawn: (id: string, name: string, script: string): SpawnOptions => ({
      wrapperPath: distFile('runWrapper.sh'),
      statusFile: path.join(dir, `run-${id}.exit`),
      cwd: dir,
      env: { PATH: process.env.PATH },
      logFd: dirFd,
      logToMake: { dir: logs, name },
      lockFd: lock.fd,
      argv: ['sh', '-c', script],
    }),
    close: () => {
      fs.closeSync(dirFd);
      fs.closeSync(lock.fd);
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Runs `fn` with a spawner, keeping the process alive while its spawns are answered. */
async function withSpawner(binary: string, fn: (spawner: NativeSpawner) => Promise<void>): Promise<void> {
  const spawner = new NativeSpawner(binary, processSpawner, memoryLogger());
  const alive = setInterval(() => {}, 1000);
  try {
    await fn(spawner);
  } finally {
    clearInterval(alive);
    await spawner.close();
  }
}

test(
  "the waiter makes the log in the checked folder, 0600 under a umask that would narrow it, with the fetcher's output; the agent then opens it through the folder and refuses it widened, linked or a link",
  { timeout: 30_000 },
  async () => {
    const s = station();
    // The spawner takes the umask it is started with: 0277 would make the file 0400 without the fchmod.
    const umask = process.umask(0o277);
    try {
      await withSpawner(BINARY, async (spawner) => {
        assert.equal(spawner.makesLogs, true);
        const proc = await spawner.spawn(s.spawn('1', 'run-1.log', 'echo out; echo err >&2; exit 3'));
        process.umask(umask);
        const own = openMadeLog(s.dirFd, s.logs, 'run-1.log');
        assert.ok(own !== null, 'the log is there once the run has started');
        assert.deepEqual(await proc.exited, { exitCode: 3, signal: null });
        const st = fs.fstatSync(own);
        assert.equal((st.mode & 0o777).toString(8), '600');
        assert.equal(st.nlink, 1);
        assert.equal(st.uid, process.getuid!());
        const text = Buffer.alloc(64);
        const n = fs.readSync(own, text, 0, 64, 0);
        assert.deepEqual(text.subarray(0, n).toString().split('\n').filter(Boolean).sort(), ['err', 'out']);
        fs.closeSync(own);
        assert.deepEqual(fs.readdirSync(s.logs), ['run-1.log'], 'nothing else is made in the folder');
        // Checked on the descriptor: a mode widened since, or a second link, is not the file the waiter made.
        const made = path.join(s.logs, 'run-1.log');
        const refused = (err: unknown) => err instanceof UnsafeStationError && err.reason === 'lock-file-unsafe';
        fs.chmodSync(made, 0o644);
        assert.throws(() => openMadeLog(s.dirFd, s.logs, 'run-1.log'), refused);
        fs.chmodSync(made, 0o600);
        fs.linkSync(made, path.join(s.dir, 'second-link'));
        assert.throws(() => openMadeLog(s.dirFd, s.logs, 'run-1.log'), refused);
        fs.unlinkSync(path.join(s.dir, 'second-link'));
        fs.symlinkSync(made, path.join(s.logs, 'linked.log'));
        assert.throws(() => openMadeLog(s.dirFd, s.logs, 'linked.log'), refused);
        assert.equal(openMadeLog(s.dirFd, s.logs, 'gone.log'), null, 'a log removed meanwhile is none');
      });
    } finally {
      process.umask(umask);
      s.close();
    }
  },
);

test(
  'a name taken before the run (a file, or a link to a victim) is refused by the waiter with "log" and nothing started; the agent then refuses it with why, and the victim is untouched',
  { timeout: 30_000 },
  async () => {
    const s = station();
    const victim = path.join(s.dir, 'victim');
    fs.writeFileSync(victim, 'precious\n', { mode: 0o600 });
    fs.symlinkSync(victim, path.join(s.logs, 'linked.log'));
    fs.writeFileSync(path.join(s.logs, 'planted.log'), 'planted\n', { mode: 0o600 });
    const ran = path.join(s.dir, 'ran');
    try {
      // The protocol itself: the spawner is this process's child, so it takes this process's descriptors.
      const raw = spawnSync(BINARY, [], {
        input: Buffer.concat([
          encodeRequest('1', s.spawn('1', 'linked.log', `touch ${ran}`)),
          encodeRequest('2', s.spawn('2', 'planted.log', `touch ${ran}`)),
          encodeRequest('3', s.spawn('3', 'a/b.log', `touch ${ran}`)),
        ]),
      });
      assert.equal(raw.status, 0);
      assert.deepEqual(raw.stdout.toString().split('\n').filter(Boolean).sort(), ['F 1 17 log', 'F 2 17 log', 'F 3 22 malformed-request']);
      assert.equal(fs.existsSync(ran), false, 'no fetcher ran');
      assert.deepEqual(
        fs.readdirSync(s.dir).filter((f) => f.endsWith('.exit')),
        [],
        'no status file was written',
      );

      await withSpawner(BINARY, async (spawner) => {
        await assert.rejects(
          spawner.spawn(s.spawn('4', 'linked.log', `touch ${ran}`)),
          (err: unknown) =>
            err instanceof UnsafeStationError &&
            err.reason === 'lock-file-unsafe' &&
            err.message.includes(`${path.join(s.logs, 'linked.log')} exists before its run started`),
        );
        assert.equal(spawner.fallbackReason, null, 'a refused log does not turn the native spawner off');
      });
      assert.equal(fs.existsSync(ran), false, 'no fetcher ran');
      assert.equal(fs.readFileSync(victim, 'utf8'), 'precious\n');
      assert.equal(fs.readFileSync(path.join(s.logs, 'planted.log'), 'utf8'), 'planted\n');
    } finally {
      s.close();
    }
  },
);

test(
  'without the native spawner (not built), a log left to the waiter is made by the agent before the fallback starts the run',
  { timeout: 30_000 },
  async () => {
    const s = station();
    try {
      await withSpawner(path.join(s.dir, 'not-built'), async (spawner) => {
        assert.equal(spawner.fallbackReason, 'not-built');
        const proc = await spawner.spawn(s.spawn('1', 'run-2.log', 'echo by-fallback; exit 4'));
        assert.deepEqual(await proc.exited, { exitCode: 4, signal: null });
        const own = openMadeLog(s.dirFd, s.logs, 'run-2.log');
        assert.ok(own !== null);
        assert.equal((fs.fstatSync(own).mode & 0o777).toString(8), '600');
        fs.closeSync(own);
        assert.equal(fs.readFileSync(path.join(s.logs, 'run-2.log'), 'utf8'), 'by-fallback\n');
      });
    } finally {
      s.close();
    }
  },
);
