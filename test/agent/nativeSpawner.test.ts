import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { SpawnerExit } from '../../agent/helperExitCodes';
import { NativeSpawner, encodeRequest } from '../../agent/runs/nativeSpawner';
import { processSpawner } from '../../agent/runs/processSpawner';
import type { RunSpawner } from '../../agent/runs/runPorts';
import { distFile } from '../../agent/paths';
import { readProcInfo } from '../../shared/node/procInfo';
import { memoryLogger } from '../support/memoryLogger';
import { removeAtExit } from '../support/removeAtExit';
import { tryLockSlot } from '../support/tryLockSlot';
import { OUT_FIXTURES } from '../support/harness';
import { waitFor } from '../support/waitFor';

// The native spawner (agent/native/quantilica-spawner.c) keeps the wrapper's guarantees: the
// slot descriptor the agent holds is the fetcher's fd 3, and the exit status reaches the status file
// also when the agent is gone. `npm run build` builds it with the station's C compiler (CI has one).
const BINARY = distFile('quantilica-spawner');

function runFiles(): { dir: string; logFd: number; lockFd: number; lockPath: string; statusFile: string; logPath: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-native-'));
  removeAtExit(dir);
  const logPath = path.join(dir, 'run.log');
  const lockPath = path.join(dir, 'slot_0.lock');
  fs.writeFileSync(lockPath, '', { mode: 0o600 });
  const lock = tryLockSlot(lockPath);
  assert.ok(lock, 'the test takes the slot as the agent does');
  return { dir, logPath, lockPath, statusFile: path.join(dir, 'run.exit'), logFd: fs.openSync(logPath, 'a', 0o600), lockFd: lock.fd };
}

test(
  'the native spawner is built, and a run it starts has the log on stdout and stderr, the very slot lock on fd 3, its own session, and its exit in the status file',
  { timeout: 30_000 },
  async () => {
    assert.ok(fs.existsSync(BINARY), `${BINARY} was built by npm run build`);
    const spawner = new NativeSpawner(BINARY, processSpawner, memoryLogger());
    assert.equal(spawner.fallbackReason, null);
    const f = runFiles();
    const gate = path.join(f.dir, 'go');
    const alive = setInterval(() => {}, 1000);
    try {
      const proc = await spawner.spawn({
        wrapperPath: distFile('runWrapper.sh'),
        statusFile: f.statusFile,
        cwd: f.dir,
        env: { PATH: process.env.PATH, QUANTILICA_RUN_ID: 'native-1' },
        logFd: f.logFd,
        lockFd: f.lockFd,
        argv: [
          'sh',
          '-c',
          `echo out; echo err >&2; while [ ! -e ${gate} ]; do sleep 0.02; done; [ "$(readlink /proc/self/fd/3)" = "${f.lockPath}" ] && exit 7`,
        ],
      });
      // The agent's own copy goes once the run has it (as runManager does): the lock must live on in the run.
      fs.closeSync(f.lockFd);
      const info = readProcInfo(proc.pid);
      assert.ok(info, 'the fetcher lives');
      assert.equal(proc.startTime, info.startTime, 'the start time names the fetcher');
      assert.equal(info.pgid, proc.pid, 'the fetcher leads its process group (cancel signals it)');
      assert.equal(info.session, proc.pid, 'and its own session');
      assert.notEqual(info.ppid, process.pid, 'its parent is the spawner, not the agent');
      assert.equal(tryLockSlot(f.lockPath), null, 'the slot stays locked by the run after the agent closed its copy');
      fs.writeFileSync(gate, '');
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
      assert.equal((fs.statSync(f.statusFile).mode & 0o777).toString(8), '600');
      const free = await waitFor(() => tryLockSlot(f.lockPath), { what: 'the slot to be free once the run ended' });
      free.closeOwnCopy();
    } finally {
      fs.writeFileSync(gate, '');
      clearInterval(alive);
      fs.closeSync(f.logFd);
      await spawner.close();
    }
  },
);

test(
  'a cancel signals the fetcher itself (128+15 as sh reports it), a missing program ends 127 with the reason in the log, and the cgroup join happens before the exec',
  { timeout: 30_000 },
  async () => {
    const spawner = new NativeSpawner(BINARY, processSpawner, memoryLogger());
    const f = runFiles();
    const alive = setInterval(() => {}, 1000);
    try {
      const marker = path.join(f.dir, 'started');
      const proc = await spawner.spawn({
        wrapperPath: '',
        statusFile: f.statusFile,
        cwd: f.dir,
        env: { PATH: process.env.PATH, QUANTILICA_RUN_ID: 'native-2' },
        logFd: f.logFd,
        lockFd: f.lockFd,
        argv: ['sh', '-c', `touch ${marker}; exec sleep 30`],
      });
      await waitFor(() => fs.existsSync(marker), { what: 'the fetcher to start' });
      assert.ok(spawner.signal({ runId: 'native-2', pgid: proc.pid, startTime: proc.startTime }, 'SIGTERM'));
      assert.deepEqual(await proc.exited, { exitCode: 143, signal: 'SIGTERM' });

      const missing = await spawner.spawn({
        wrapperPath: '',
        statusFile: `${f.statusFile}.2`,
        cwd: f.dir,
        env: { PATH: '/nonexistent' },
        logFd: f.logFd,
        lockFd: f.lockFd,
        argv: ['no-such-fetcher'],
      });
      assert.deepEqual(await missing.exited, { exitCode: 127, signal: null });
      assert.match(fs.readFileSync(f.logPath, 'utf8'), /quantilica: cannot run no-such-fetcher: No such file or directory/);

      // A "cgroup.procs" that cannot be written stands for a cgroup the run cannot join: the fetcher never runs.
      const ran = path.join(f.dir, 'ran');
      const refused = await spawner.spawn({
        wrapperPath: '',
        statusFile: `${f.statusFile}.3`,
        cwd: f.dir,
        env: { PATH: process.env.PATH, QUANTILICA_CGROUP_PROCS: path.join(f.dir, 'no-dir', 'cgroup.procs') },
        logFd: f.logFd,
        lockFd: f.lockFd,
        argv: ['touch', ran],
      });
      assert.deepEqual(await refused.exited, { exitCode: 125, signal: null });
      assert.equal(fs.existsSync(ran), false);
      assert.match(fs.readFileSync(f.logPath, 'utf8'), /could not join the run's cgroup/);

      // A cgroup.procs that takes the pid (a plain file here) is written with the fetcher's own pid, and the variable is not passed on.
      const procs = path.join(f.dir, 'cgroup.procs');
      fs.writeFileSync(procs, '');
      const joined = await spawner.spawn({
        wrapperPath: '',
        statusFile: `${f.statusFile}.4`,
        cwd: f.dir,
        env: { PATH: process.env.PATH, QUANTILICA_CGROUP_PROCS: procs },
        logFd: f.logFd,
        lockFd: f.lockFd,
        argv: ['sh', '-c', '[ -z "${QUANTILICA_CGROUP_PROCS+set}" ] && exit 4'],
      });
      assert.deepEqual(await joined.exited, { exitCode: 4, signal: null });
      assert.equal(fs.readFileSync(procs, 'utf8'), `${joined.pid}\n`);
    } finally {
      clearInterval(alive);
      fs.closeSync(f.logFd);
      fs.closeSync(f.lockFd);
      await spawner.close();
    }
  },
);

test('the exit status is recorded when the agent that started the run was killed with kill -9', { timeout: 30_000 }, async () => {
  const f = runFiles();
  const gate = path.join(f.dir, 'go');
  // A stand-in agent: a node process that starts one run through the spawner, says its pid, and waits to be killed.
  const script = `
    const { NativeSpawner } = require(${JSON.stringify(path.join(__dirname, '..', '..', 'agent', 'runs', 'nativeSpawner.js'))});
    const { processSpawner } = require(${JSON.stringify(path.join(__dirname, '..', '..', 'agent', 'runs', 'processSpawner.js'))});
    const fs = require('node:fs');
    setInterval(() => {}, 1000);
    const lockFd = fs.openSync(${JSON.stringify(f.lockPath)}, 'r+');
    require('fs-ext').flockSync(lockFd, 'exnb');
    const logFd = fs.openSync(${JSON.stringify(f.logPath)}, 'a');
    const s = new NativeSpawner(${JSON.stringify(BINARY)}, processSpawner, { warn() {}, info() {}, error() {}, debug() {} });
    s.spawn({ wrapperPath: '', statusFile: ${JSON.stringify(f.statusFile)}, cwd: '/', env: { PATH: process.env.PATH, QUANTILICA_RUN_ID: 'native-3' }, logFd, lockFd,
      argv: ['sh', '-c', 'while [ ! -e ${gate} ]; do sleep 0.02; done; exit 9'] })
      .then((p) => { fs.closeSync(lockFd); process.stdout.write(p.pid + '\\n'); });`;
  // The test's own lock copy goes first: the stand-in agent takes the slot.
  fs.closeSync(f.lockFd);
  const alive = setInterval(() => {}, 1000);
  const agent = spawn(process.execPath, ['-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
    cwd: path.join(__dirname, '..', '..', '..'),
  });
  try {
    const pid = Number(await new Promise<string>((resolve) => agent.stdout.once('data', (d: Buffer) => resolve(d.toString()))));
    assert.ok(pid > 0);
    // The fetcher's parent is its waiter, whose parent is the spawner.
    const waiterPid = readProcInfo(pid)?.ppid ?? 0;
    const spawnerPid = readProcInfo(waiterPid)?.ppid ?? 0;
    assert.equal(readProcInfo(spawnerPid)?.ppid, agent.pid, "the spawner is the agent's child");
    agent.kill('SIGKILL');
    await new Promise((resolve) => agent.once('exit', resolve));
    assert.equal(tryLockSlot(f.lockPath), null, 'the run holds the slot after its agent died');
    assert.equal(fs.existsSync(f.statusFile), false);
    fs.writeFileSync(gate, '');
    await waitFor(() => fs.existsSync(f.statusFile) && fs.readFileSync(f.statusFile, 'utf8') === '9\n', {
      what: 'the orphaned spawner to record the exit status',
    });
    // And the spawner, its last child reaped and its agent gone, exits: nothing of it is left.
    await waitFor(
      () => {
        const info = readProcInfo(spawnerPid);
        return info === null || info.state === 'Z';
      },
      { what: 'the spawner to exit' },
    );
  } finally {
    fs.writeFileSync(gate, '');
    clearInterval(alive);
    agent.kill('SIGKILL');
    fs.closeSync(f.logFd);
  }
});

test(
  'the spawner answers a malformed request with F and a token, takes nothing after bad framing; a missing binary, or a spawner that stops at once, sends every spawn to the fallback',
  { timeout: 30_000 },
  async () => {
    const child = spawnSync(BINARY, [], {
      input: Buffer.concat([
        (() => {
          const body = Buffer.from('req-1\0not-a-number\0');
          const h = Buffer.alloc(4);
          h.writeUInt32LE(body.length);
          return Buffer.concat([h, body]);
        })(),
        Buffer.from([0xff, 0xff, 0xff, 0xff]),
        encodeRequest('never', { wrapperPath: '', statusFile: '/nonexistent/x', cwd: '/', env: {}, argv: ['true'], logFd: 1, lockFd: 1 }),
      ]),
    });
    assert.equal(child.status, 0);
    assert.equal(child.stdout.toString(), 'F req-1 22 malformed-request\n');

    const f = runFiles();
    const alive = setInterval(() => {}, 1000);
    try {
      const spawner = new NativeSpawner(path.join(f.dir, 'not-built'), processSpawner, memoryLogger());
      assert.equal(spawner.fallbackReason, 'not-built');
      const proc = await spawner.spawn({
        wrapperPath: distFile('runWrapper.sh'),
        statusFile: f.statusFile,
        cwd: f.dir,
        env: { PATH: process.env.PATH },
        logFd: f.logFd,
        lockFd: f.lockFd,
        argv: ['sh', '-c', 'exit 5'],
      });
      assert.deepEqual(await proc.exited, { exitCode: 5, signal: null });
      assert.equal(fs.readFileSync(f.statusFile, 'utf8'), '5\n', 'runWrapper.sh recorded it');

      // A spawner that stops before reading any request (the kernel gave it no pidfd of its parent):
      // the run it was asked for, and every later one, goes to the fallback.
      const refusing = path.join(f.dir, 'refusing-spawner');
      fs.writeFileSync(refusing, `#!/bin/sh\nexit ${SpawnerExit.noParent}\n`, { mode: 0o700 });
      const logger = memoryLogger();
      const refused = new NativeSpawner(refusing, processSpawner, logger);
      const viaFallback = await refused.spawn({
        wrapperPath: distFile('runWrapper.sh'),
        statusFile: `${f.statusFile}.2`,
        cwd: f.dir,
        env: { PATH: process.env.PATH },
        logFd: f.logFd,
        lockFd: f.lockFd,
        argv: ['sh', '-c', 'exit 6'],
      });
      assert.deepEqual(await viaFallback.exited, { exitCode: 6, signal: null });
      assert.equal(refused.fallbackReason, 'spawner-refused');
      assert.equal(logger.records.filter((r) => /cannot run here/.test(r.msg ?? '')).length, 1, 'the agent says why, once');
    } finally {
      clearInterval(alive);
      fs.closeSync(f.logFd);
      fs.closeSync(f.lockFd);
    }
  },
);

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** The fallback, counting the runs it was handed. */
function countingFallback(): RunSpawner & { started: string[] } {
  const started: string[] = [];
  return {
    ...processSpawner,
    started,
    spawn: (opts) => {
      started.push(opts.statusFile);
      return processSpawner.spawn(opts);
    },
  };
}

test(
  "a run whose start blocks before its exec (its cgroup.procs a FIFO nobody reads yet) holds up no other run; it is answered once it has exec'd",
  { timeout: 30_000 },
  async () => {
    const spawner = new NativeSpawner(BINARY, processSpawner, memoryLogger());
    const f = runFiles();
    // Opening a FIFO to write waits for a reader: the fetcher stays between vfork and exec, as it would
    // on an exec from a hung network mount or a cgroup write that stalls.
    const fifo = path.join(f.dir, 'cgroup.procs');
    assert.equal(spawnSync('mkfifo', ['-m', '600', fifo]).status, 0);
    let reader: number | null = null;
    const alive = setInterval(() => {}, 1000);
    const run = (statusFile: string, env: Record<string, string | undefined>, code: number) =>
      spawner.spawn({
        wrapperPath: '',
        statusFile,
        cwd: f.dir,
        env: { PATH: process.env.PATH, ...env },
        logFd: f.logFd,
        lockFd: f.lockFd,
        argv: ['sh', '-c', `exit ${code}`],
      });
    try {
      const blocked = run(`${f.statusFile}.blocked`, { QUANTILICA_CGROUP_PROCS: fifo }, 3);
      const next = await Promise.race([run(`${f.statusFile}.next`, {}, 4), sleep(5_000).then(() => null)]);
      assert.ok(next, 'the next run started while the first one waited before its exec');
      assert.deepEqual(await next.exited, { exitCode: 4, signal: null });
      assert.equal(
        await Promise.race([blocked.then(() => 'answered'), sleep(200).then(() => 'waiting')]),
        'waiting',
        'no "S" before the fetcher has its session (the agent signals its group)',
      );
      reader = fs.openSync(fifo, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
      const first = await blocked;
      assert.deepEqual(await first.exited, { exitCode: 3, signal: null });
      const joined = Buffer.alloc(64);
      assert.equal(
        joined.toString('latin1', 0, fs.readSync(reader, joined)),
        `${first.pid}\n`,
        "the fetcher joined with its own pid, then exec'd",
      );
    } finally {
      // Whatever failed above, the blocked fetcher is let go.
      reader ??= fs.openSync(fifo, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
      await spawner.close();
      await sleep(100);
      fs.closeSync(reader);
      clearInterval(alive);
      fs.closeSync(f.logFd);
      fs.closeSync(f.lockFd);
    }
  },
);

test(
  'a burst of runs that end at once: each is answered "S" before its "E", under its own id, with its own exit code',
  { timeout: 60_000 },
  async () => {
    const spawner = new NativeSpawner(BINARY, processSpawner, memoryLogger());
    const f = runFiles();
    const alive = setInterval(() => {}, 1000);
    try {
      const codes = Array.from({ length: 40 }, (_, i) => i % 7);
      const procs = await Promise.all(
        codes.map((code, i) =>
          spawner.spawn({
            wrapperPath: '',
            statusFile: `${f.statusFile}.${i}`,
            cwd: f.dir,
            env: { PATH: process.env.PATH },
            logFd: f.logFd,
            lockFd: f.lockFd,
            argv: ['sh', '-c', `exit ${code}`],
          }),
        ),
      );
      assert.equal(new Set(procs.map((p) => p.pid)).size, codes.length);
      assert.deepEqual(await Promise.all(procs.map(async (p) => (await p.exited)?.exitCode)), codes);
      assert.equal(spawner.fallbackReason, null);
    } finally {
      clearInterval(alive);
      await spawner.close();
      fs.closeSync(f.logFd);
      fs.closeSync(f.lockFd);
    }
  },
);

test(
  'a request the spawner has no memory for is answered "no-memory" and started by the fallback; the spawner takes the next request as before',
  { timeout: 30_000 },
  async () => {
    // The spawner's address space capped (ulimit -v) a little above what it uses idle, so the buffer
    // for one large request (1.5 MB of environment) cannot be had, while a small one can.
    const probe = spawn(BINARY, [], { stdio: ['pipe', 'pipe', 'inherit'] });
    // Measured once it has answered a request (a malformed one): loaded, and its heap in use.
    const answered = new Promise((resolve) => probe.stdout.once('data', resolve));
    const body = Buffer.from('probe\0');
    const head = Buffer.alloc(4);
    head.writeUInt32LE(body.length);
    probe.stdin.write(Buffer.concat([head, body]));
    await answered;
    const idleKb = await waitFor(
      () => {
        try {
          return Number(/^VmSize:\s+(\d+) kB$/m.exec(fs.readFileSync(`/proc/${probe.pid}/status`, 'utf8'))?.[1] ?? 0) || null;
        } catch {
          return null;
        }
      },
      { what: "the spawner's idle size" },
    );
    probe.stdin.end();
    const f = runFiles();
    const capped = path.join(f.dir, 'capped-spawner');
    fs.writeFileSync(capped, `#!/bin/sh\nulimit -v ${idleKb + 1024}\nexec ${BINARY}\n`, { mode: 0o700 });
    const fallback = countingFallback();
    const logger = memoryLogger();
    const spawner = new NativeSpawner(capped, fallback, logger);
    const alive = setInterval(() => {}, 1000);
    try {
      const big = Object.fromEntries(Array.from({ length: 15 }, (_, i) => [`BIG_${i}`, 'x'.repeat(100_000)]));
      const large = await spawner.spawn({
        wrapperPath: distFile('runWrapper.sh'),
        statusFile: `${f.statusFile}.large`,
        cwd: f.dir,
        env: { PATH: process.env.PATH, ...big },
        logFd: f.logFd,
        lockFd: f.lockFd,
        argv: ['sh', '-c', 'exit 6'],
      });
      assert.deepEqual(await large.exited, { exitCode: 6, signal: null });
      assert.deepEqual(fallback.started, [`${f.statusFile}.large`], 'the fallback started the large run');
      // The next one is the spawner's again (what the fetcher does under the cap does not matter here).
      const small = await spawner.spawn({
        wrapperPath: '',
        statusFile: `${f.statusFile}.small`,
        cwd: f.dir,
        env: { PATH: process.env.PATH },
        logFd: f.logFd,
        lockFd: f.lockFd,
        argv: ['true'],
      });
      await small.exited;
      assert.deepEqual(fallback.started, [`${f.statusFile}.large`], 'the spawner started the small run');
      assert.equal(spawner.fallbackReason, null);
      assert.deepEqual(
        logger.records.filter((r) => r.level === 'warn'),
        [],
      );
    } finally {
      clearInterval(alive);
      await spawner.close();
      fs.closeSync(f.logFd);
      fs.closeSync(f.lockFd);
    }
  },
);

// Yama (kernel.yama.ptrace_scope >= 1, Ubuntu's default) refuses an ordinary account's spawner
// pidfd_getfd(2) on its own parent, the agent. Changing ptrace_scope is not how this test gets that
// refusal: the kernel may have no Yama (no /proc/sys/kernel/yama), and Yama never refuses root. The
// same refusal (EPERM from the ptrace access check pidfd_getfd makes) comes from running the spawner
// under another account than its parent, which needs root.
test(
  "a spawner the kernel refuses the agent's descriptors says so at its start, before any request; the agent logs it once, naming the fallback, which starts every run",
  { timeout: 30_000, skip: process.getuid?.() !== 0 ? 'needs root, to run the spawner under another account than the test' : false },
  async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-refused-'));
    fs.chmodSync(dir, 0o755);
    const binary = path.join(dir, 'quantilica-spawner');
    fs.copyFileSync(BINARY, binary);
    fs.chmodSync(binary, 0o755);
    const asNobody = path.join(dir, 'as-nobody');
    fs.writeFileSync(asNobody, `#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups ${binary}\n`, { mode: 0o755 });

    // Its request pipe open and nothing sent: it ends at once, with the code that says so.
    const direct = spawn(asNobody, [], { stdio: ['pipe', 'ignore', 'inherit'] });
    try {
      const ended = await Promise.race([
        new Promise((resolve) => direct.once('exit', resolve)),
        sleep(10_000).then(() => 'still waiting for a request'),
      ]);
      assert.equal(ended, SpawnerExit.descriptorsRefused);
    } finally {
      direct.kill('SIGKILL');
    }

    const f = runFiles();
    const logger = memoryLogger();
    const fallback = countingFallback();
    const spawner = new NativeSpawner(asNobody, fallback, logger);
    const alive = setInterval(() => {}, 1000);
    try {
      for (const code of [6, 8]) {
        const proc = await spawner.spawn({
          wrapperPath: distFile('runWrapper.sh'),
          statusFile: `${f.statusFile}.${code}`,
          cwd: f.dir,
          env: { PATH: process.env.PATH },
          logFd: f.logFd,
          lockFd: f.lockFd,
          argv: ['sh', '-c', `exit ${code}`],
        });
        assert.deepEqual(await proc.exited, { exitCode: code, signal: null });
      }
      assert.deepEqual(fallback.started, [`${f.statusFile}.6`, `${f.statusFile}.8`]);
      assert.equal(spawner.fallbackReason, 'pidfd-getfd-refused');
      const warned = logger.records.filter((r) => r.level === 'warn');
      assert.equal(warned.length, 1, 'said once');
      assert.match(warned[0]?.msg ?? '', /pidfd_getfd.*Yama ptrace_scope of 1 or more.*worker thread under runWrapper\.sh/);
      assert.deepEqual(warned[0]?.obj, { reason: 'pidfd-getfd-refused', detail: `exit ${SpawnerExit.descriptorsRefused}` });
    } finally {
      clearInterval(alive);
      await spawner.close();
      fs.closeSync(f.logFd);
      fs.closeSync(f.lockFd);
      fs.rmSync(dir, { recursive: true, force: true });
    }
  },
);

test(
  'a process with nothing left to do but a spawn on its way waits for its answer: an agent stopping meanwhile still records the start',
  { timeout: 30_000 },
  async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-native-'));
    fs.writeFileSync(path.join(dir, 'slot_0.lock'), '', { mode: 0o600 });
    // The fetcher waits before its exec until the FIFO is opened to read: the process has asked, and
    // has nothing else to keep it alive, well before the answer can come.
    const fifo = path.join(dir, 'cgroup.procs');
    assert.equal(spawnSync('mkfifo', ['-m', '600', fifo]).status, 0);
    const statusFile = path.join(dir, 'run.exit');
    const status = () => (fs.existsSync(statusFile) ? fs.readFileSync(statusFile, 'utf8') : null);
    const child = spawn(process.execPath, [path.join(OUT_FIXTURES, 'spawnThenNothing.js'), dir, fifo], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    let reader: number | null = null;
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (text: string) => {
      out += text;
      if (reader === null && out.includes('asked\n')) reader = fs.openSync(fifo, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
    });
    const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
    try {
      assert.equal(code, 0);
      assert.match(out, /^asked\nstarted \d+\n$/, 'the answer came before the process ended');
      const ended = await waitFor(status, { what: "the fetcher's status file" });
      assert.match(ended, /^0\n/, 'the fetcher ran and ended 0');
    } finally {
      // Whatever failed above, a fetcher still waiting before its exec is let go.
      reader ??= fs.openSync(fifo, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
      await waitFor(status, { what: 'the run to end' }).catch(() => undefined);
      fs.closeSync(reader);
      fs.rmSync(dir, { recursive: true, force: true });
    }
  },
);
