// `node out/bench/diskGate.js`: what the disk gate costs. Per check: time (µs) and processes
// spawned, counted two ways (Node's child_process entry point in-process, and the kernel's
// clone/fork/execve calls under strace when it is installed); and the idle CPU of a process whose
// gate polls every 15 s, measured over a real window (BENCH_IDLE_SECONDS, default 30).
import { ChildProcess, execFile, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { DiskGate } from '../agent/disk/diskGate';
import { statfsProbe, type DiskProbe } from '../agent/disk/diskProbe';
import { memoryLogger } from '../test/support/memoryLogger';
import { benchNumber } from './benchSupport';

const CHECKS = benchNumber('BENCH_CHECKS', process.env.BENCH_CHECKS, 20000, { min: 1, max: 10_000_000, whole: true });
// 31 s: two whole 15 s poll intervals fit in the window.
const IDLE_SECONDS = benchNumber('BENCH_IDLE_SECONDS', process.env.BENCH_IDLE_SECONDS, 31, { min: 0, max: 3600 });
const DF_CHECKS = 200;
const disk = { warnGb: 0.002, pauseGb: 0.001, resumeGb: 0.003, pollSeconds: 15, maxWaitSeconds: 3600 };

/**
 * What check-disk-space does on Linux (it is not installed here): run `df -Pk` and parse it. Kept as
 * a control: it shows the spawn counters below do see a process when there is one.
 */
const dfProbe: DiskProbe = async (p) => {
  const { stdout } = await promisify(execFile)('df', ['-Pk', p]);
  const cols = stdout.trim().split('\n')[1].split(/\s+/);
  return { freeBytes: Number(cols[3]) * 1024, totalBytes: Number(cols[1]) * 1024 };
};

/** Child mode for strace: start a gate and run `n` checks, nothing else. */
async function checkLoop(dataDir: string, n: number, probe: DiskProbe): Promise<void> {
  const gate = new DiskGate({ dataDir, disk, logger: memoryLogger(), probe });
  await gate.start();
  for (let i = 0; i < n; i++) await gate.checkNow();
  await gate.close();
}

/** Counts processes and threads the kernel created for `node <this> --loop dir n`, under strace. */
function straceCount(dataDir: string, n: number, probe: 'statfs' | 'df'): { processes: number; threads: number } | null {
  const out = path.join(dataDir, `strace-${probe}-${n}.txt`);
  const r = spawnSync(
    'strace',
    [
      '-f',
      '-qq',
      '-e',
      'trace=clone,clone3,fork,vfork,execve',
      '-o',
      out,
      process.execPath,
      __filename,
      '--loop',
      dataDir,
      String(n),
      probe,
    ],
    { stdio: 'ignore' },
  );
  if (r.error || r.status !== 0) return null;
  let processes = 0;
  let threads = 0;
  for (const line of fs.readFileSync(out, 'utf8').split('\n')) {
    if (/\b(clone3?|fork|vfork)\(/.test(line) && !line.includes('resumed')) {
      if (line.includes('CLONE_THREAD')) threads += 1;
      else processes += 1;
    }
    // execve is not counted: it replaces a program in a process already counted by its clone.
  }
  return { processes, threads };
}

function cpuPercent(fromCpu: NodeJS.CpuUsage, fromWall: bigint): number {
  const cpu = process.cpuUsage(fromCpu);
  const wallUs = Number(process.hrtime.bigint() - fromWall) / 1000;
  return ((cpu.user + cpu.system) / wallUs) * 100;
}

async function main(): Promise<void> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-diskgate-'));
  try {
    // Idle first, before the loops below leave JIT and GC work behind: the same window once with
    // the gate polling at the real 15 s interval, then once without a gate (what an idle Node
    // process costs anyway). The gate goes first, so leftovers of start-up count against it, not
    // for it. Probe calls are counted to show the polls happened.
    const idleWindow = async () => {
      const cpu = process.cpuUsage();
      const wall = process.hrtime.bigint();
      await new Promise((resolve) => setTimeout(resolve, IDLE_SECONDS * 1000));
      return cpuPercent(cpu, wall);
    };
    let polls = 0;
    const counting: DiskProbe = (p) => {
      polls += 1;
      return statfsProbe(p);
    };
    const idleGate = new DiskGate({ dataDir, disk, logger: memoryLogger(), probe: counting });
    await idleGate.start();
    polls = 0;
    const idleCpu = await idleWindow();
    await idleGate.close();
    const baselineCpu = await idleWindow();

    // Processes spawned through Node, counted where every spawn/exec/execFile/fork passes.
    const proto = ChildProcess.prototype as unknown as { spawn: (...args: unknown[]) => unknown };
    const realSpawn = proto.spawn;
    let nodeSpawns = 0;
    proto.spawn = function (this: unknown, ...args: unknown[]) {
      nodeSpawns += 1;
      return realSpawn.apply(this, args);
    };
    const timeChecks = async (probe: DiskProbe, n: number) => {
      const gate = new DiskGate({ dataDir, disk, logger: memoryLogger(), probe });
      await gate.start();
      for (let i = 0; i < Math.min(1000, n); i++) await gate.checkNow(); // warm-up: JIT, libuv thread pool
      nodeSpawns = 0;
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < n; i++) await gate.checkNow();
      const us = Number(process.hrtime.bigint() - t0) / 1000 / n;
      await gate.close();
      return { us, spawns: nodeSpawns / n };
    };
    const statfs = await timeChecks(statfsProbe, CHECKS);
    const df = await timeChecks(dfProbe, DF_CHECKS);
    proto.spawn = realSpawn;

    const t0 = process.hrtime.bigint();
    for (let i = 0; i < CHECKS; i++) await statfsProbe(dataDir);
    const perProbeUs = Number(process.hrtime.bigint() - t0) / 1000 / CHECKS;

    const kernelPerCheck = (probe: 'statfs' | 'df', n: number) => {
      const base = straceCount(dataDir, 0, probe);
      const loaded = straceCount(dataDir, n, probe);
      return base && loaded ? { processes: (loaded.processes - base.processes) / n, threads: (loaded.threads - base.threads) / n } : null;
    };
    const kernel = kernelPerCheck('statfs', 2000);
    const kernelDf = kernelPerCheck('df', 100);

    const na = 'strace not available';
    // What the polls themselves cost, from the measured time per check: the part of the idle CPU
    // that is the gate's, below what a whole-process sample can resolve.
    const gateShare = ((polls * statfs.us) / (IDLE_SECONDS * 1e6)) * 100;
    const rows: Array<[string, string]> = [
      ['gate check with statfs (probe + state + admission), µs', statfs.us.toFixed(1)],
      ['statfs probe alone, µs', perProbeUs.toFixed(1)],
      ['processes per check, statfs (Node child_process)', String(statfs.spawns)],
      ['processes per check, statfs (kernel clone/fork, strace)', kernel ? String(kernel.processes) : na],
      ['threads per check, statfs (kernel, strace)', kernel ? String(kernel.threads) : na],
      ['control: gate check with df -Pk (check-disk-space way), µs', df.us.toFixed(1)],
      ['control: processes per check, df (Node child_process)', String(df.spawns)],
      ['control: processes per check, df (kernel, strace)', kernelDf ? String(kernelDf.processes) : na],
      [`idle CPU with the gate polling every 15 s, ${IDLE_SECONDS} s window (${polls} polls)`, `${idleCpu.toFixed(4)} %`],
      [`idle CPU of the same process without a gate, ${IDLE_SECONDS} s window`, `${baselineCpu.toFixed(4)} %`],
      ['the polls themselves (polls × µs per check / window)', `${gateShare.toFixed(6)} %`],
    ];
    const width = Math.max(...rows.map(([k]) => k.length));
    for (const [k, v] of rows) console.log(`${k.padEnd(width)}  ${v}`);
    console.log(
      JSON.stringify({
        bench: 'diskGate',
        checks: CHECKS,
        perCheckUs: +statfs.us.toFixed(2),
        statfsUs: +perProbeUs.toFixed(2),
        spawnsPerCheckNode: statfs.spawns,
        spawnsPerCheckKernel: kernel?.processes ?? null,
        threadsPerCheckKernel: kernel?.threads ?? null,
        dfPerCheckUs: +df.us.toFixed(2),
        dfSpawnsPerCheckNode: df.spawns,
        dfSpawnsPerCheckKernel: kernelDf?.processes ?? null,
        idleSeconds: IDLE_SECONDS,
        idlePolls: polls,
        idleCpuPercent: +idleCpu.toFixed(5),
        baselineIdleCpuPercent: +baselineCpu.toFixed(5),
        pollsCpuPercent: +gateShare.toFixed(7),
        node: process.version,
      }),
    );
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

if (process.argv[2] === '--loop') {
  void checkLoop(process.argv[3], Number(process.argv[4]), process.argv[5] === 'df' ? dfProbe : statfsProbe);
} else {
  main().catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  });
}
