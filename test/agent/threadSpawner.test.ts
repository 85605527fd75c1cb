import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { ThreadSpawner } from '../../agent/runs/threadSpawner';
import { distFile } from '../../agent/paths';
import { readProcInfo } from '../../shared/node/procInfo';
import { removeAtExit } from '../support/removeAtExit';

/** A run's files in a private folder: the log, the slot file (fd 3 of the run) and the status file. */
function runFiles(): { dir: string; logFd: number; lockFd: number; lockPath: string; statusFile: string; logPath: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-spawn-'));
  removeAtExit(dir);
  const logPath = path.join(dir, 'run.log');
  const lockPath = path.join(dir, 'slot_0.lock');
  return {
    dir,
    logPath,
    lockPath,
    statusFile: path.join(dir, 'run.exit'),
    logFd: fs.openSync(logPath, 'a', 0o600),
    lockFd: fs.openSync(lockPath, 'w+', 0o600),
  };
}

test(
  'runs spawned by the worker thread get the log on stdout/stderr and the slot file on fd 3; their exit comes back to the main thread',
  { timeout: 30_000 },
  async () => {
    const spawner = new ThreadSpawner();
    const f = runFiles();
    try {
      const proc = await spawner.spawn({
        wrapperPath: distFile('runWrapper.sh'),
        statusFile: f.statusFile,
        cwd: f.dir,
        env: { PATH: process.env.PATH, QUANTILICA_RUN_ID: 'spawn-test' },
        logFd: f.logFd,
        lockFd: f.lockFd,
        argv: ['sh', '-c', `echo out; echo err >&2; [ "$(stat -L -c %i /proc/self/fd/3)" = "${fs.statSync(f.lockPath).ino}" ] && exit 7`],
      });
      assert.ok(proc.pid > 0);
      assert.equal(proc.startTime, readProcInfo(proc.pid)?.startTime ?? proc.startTime);
      // The fd-3 check decides the code: 7 only when the run's fd 3 is the slot file.
      assert.deepEqual(await proc.exited, { exitCode: 7, signal: null });
      assert.equal(
        fs
          .readFileSync(f.logPath, 'utf8')
          .split('\n')
          .filter((l) => l !== '')
          .sort()
          .join(','),
        'err,out',
      );
      assert.equal(spawner.readStatus(f.statusFile).exitCode, 7);
    } finally {
      fs.closeSync(f.logFd);
      fs.closeSync(f.lockFd);
      await spawner.close();
    }
  },
);

test(
  'when the worker thread is gone, a run it started is still followed to its end by its group and status file',
  { timeout: 30_000 },
  async () => {
    const spawner = new ThreadSpawner();
    const f = runFiles();
    const gate = path.join(f.dir, 'go');
    // The watch polls on unref'd timers (an agent has its server to keep it alive; this test has not).
    const alive = setInterval(() => {}, 1000);
    try {
      const proc = await spawner.spawn({
        wrapperPath: distFile('runWrapper.sh'),
        statusFile: f.statusFile,
        cwd: f.dir,
        env: { PATH: process.env.PATH, QUANTILICA_RUN_ID: 'spawn-test-2' },
        logFd: f.logFd,
        lockFd: f.lockFd,
        argv: ['sh', '-c', `while [ ! -e ${gate} ]; do sleep 0.05; done; exit 3`],
      });
      await spawner.close();
      // The wrapper's exit can no longer be learned from the thread that started it.
      assert.equal(await proc.exited, null);
      const watch = spawner.watch(
        { runId: 'spawn-test-2', pgid: proc.pid, startTime: proc.startTime },
        f.statusFile,
        proc.exited,
        () => {},
      );
      fs.writeFileSync(gate, '');
      const ended = await watch.ended;
      assert.equal(ended.exitCode, 3);
      assert.equal(ended.unknown, undefined);
      // After close, spawns are made in-thread and still work.
      const again = await spawner.spawn({
        wrapperPath: distFile('runWrapper.sh'),
        statusFile: `${f.statusFile}.2`,
        cwd: f.dir,
        env: { PATH: process.env.PATH },
        logFd: f.logFd,
        lockFd: f.lockFd,
        argv: ['true'],
      });
      assert.deepEqual(await again.exited, { exitCode: 0, signal: null });
    } finally {
      clearInterval(alive);
      fs.closeSync(f.logFd);
      fs.closeSync(f.lockFd);
    }
  },
);
