import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { connectAgent } from '../agent/client/agentClient';
import { removeAtExit } from '../test/support/removeAtExit';
import { benchNumber, benchStationEnv, percentile, printTable, sampleIdle, startAgent, stopAgent } from './benchSupport';
import { fileCreationMicros } from './fileCreationMicros';
import { slotCycles, type SlotCycle } from './slotCycles';

// The slots benchmark, in one run on one machine: 1,000 no-op runs through the three pools (3+2+6
// slots) by
// - Node's spawn ceiling: /bin/true spawned 11 at a time (no slots, no bookkeeping);
// - a bash+flock peer written like cron_fetch.sh: 11 concurrent loops over the same slot files, each
//   polling for a free slot with `flock -n`, recording each exit status;
// - the real agent (`quantilica agent`, its own process) driven over its protocol by one client;
// plus enqueue→spawn latency with a free slot, the agent's CPU per run (main thread, all threads, the
// spawner) and its RSS: idle before the bursts, 5 s after the measured burst's last run ended, idle at
// the end. The agent gets two bursts of the same runs: the first after its start, reported on its own
// line (V8 compiles the agent's hot paths during it: CPU paid once per agent process), and the
// measured one, a station's agent between two of its days' bursts. Then warm rounds (WARM_ROUNDS):
// each measures the ceiling and the peer again and gives the agent one more burst, so each burst's
// ratios compare figures of the same minute on a machine whose speed drifts between minutes, and the
// medians show the agent as V8 leaves it after thousands of runs.
// Run: npm run bench -- slots   (or node out/bench/slots.js [runs]; BENCH_WARM_ROUNDS=n, default 5)

/** The runs of each burst: the first argument, also for the benchmarks built on this one (slotsPolicies). */
export const RUNS = benchNumber('the count of runs', process.argv[2], 1000, { min: 1, max: 1_000_000, whole: true });
/**
 * BENCH_WARM_ROUNDS, 5 unless set. Why several: V8 goes on optimizing the agent's hot paths for the
 * first time well after the second burst (functions that turn hot only after thousands of runs): a
 * 9-burst run gave 2.06 ms of CPU per run in the second burst, 1.62 and 1.65 in the third and fourth,
 * and 1.33–1.69 in the fifth to ninth: one burst's figure moves by a fifth from one minute to the next
 * on these shared machines, so the rounds' median is reported.
 */
const WARM_ROUNDS = benchNumber('BENCH_WARM_ROUNDS', process.env.BENCH_WARM_ROUNDS, 5, { min: 1, max: 20, whole: true });
const IDLE_SECONDS = benchNumber('BENCH_IDLE_SECONDS', process.env.BENCH_IDLE_SECONDS, 10, { min: 0, max: 3600 });
const WRAPPER = path.resolve(__dirname, '..', '..', 'dist', 'runWrapper.sh');
const CONCURRENCY = 11;
/**
 * A spawn ceiling at or above this (a run every 3.3 ms or sooner) means fork+exec is cheap here: the
 * agent's own per-run work is then a larger share of each run, and the target share of the ceiling is
 * 60 %; below it (a VM where one fork+exec costs ~3 ms) 80 %.
 */
const FAST_FORK_RUNS_PER_SECOND = 300;
const POOLS = [
  ['noop-heavy', 'heavy-io', 3],
  ['noop-cpu', 'cpu-analysis', 2],
  ['noop-light', 'network-light', 6],
] as const;

/** Fields added to every catalog entry (a run policy), or none. */
export type EntryPolicy = Record<string, unknown>;

function station(policy: EntryPolicy = {}) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qbench-'));
  const catalog = path.join(root, 'catalog.json');
  fs.writeFileSync(catalog, JSON.stringify({ fetchers: POOLS.map(([name, pool]) => ({ name, pool, argv: ['/bin/true'], ...policy })) }));
  const env = {
    ...benchStationEnv(root, catalog),
    CRON_DISK_PAUSE_GB: '0.0001',
    CRON_DISK_WARN_GB: '0.0002',
    CRON_DISK_RESUME_GB: '0.0002',
  };
  return { root, env, connectionFile: path.join(root, 'home', '.quantilica', 'agent.json') };
}

/**
 * /bin/true, CONCURRENCY at a time: what Node's child_process can do on this machine now. With
 * `wrapped`, each /bin/true under the agent's run wrapper (dist/runWrapper.sh: two shells, so a run's
 * exit status is recorded even when the agent dies): the ceiling of any run the agent starts.
 */
export async function spawnCeiling(wrapped = false): Promise<number> {
  const statusDir = fs.mkdtempSync(path.join(os.tmpdir(), 'qbench-status-'));
  let next = 0;
  const started = process.hrtime.bigint();
  const lane = async (): Promise<void> => {
    while (next < RUNS) {
      next += 1;
      await new Promise<void>((resolve, reject) => {
        const child = wrapped
          ? spawn(WRAPPER, [path.join(statusDir, `${next}.exit`), '/bin/true'], { stdio: 'ignore' })
          : spawn('/bin/true', [], { stdio: 'ignore' });
        child.once('error', reject);
        child.once('exit', () => resolve());
      });
    }
  };
  try {
    await Promise.all(Array.from({ length: CONCURRENCY }, lane));
    return RUNS / (Number(process.hrtime.bigint() - started) / 1e9);
  } finally {
    // A thousand status files per call: left in the machine's temp folder, they pile up run after run.
    removeAtExit(statusDir);
  }
}

/** cron_fetch.sh's way: each loop takes a free slot of its pool with flock -n (polling), runs, records. */
function bashPeer(): Promise<number> {
  const { root } = station();
  const lockDir = path.join(root, 'locks');
  for (const [, pool] of POOLS) fs.mkdirSync(path.join(lockDir, pool), { recursive: true });
  const loop = (lane: number) => `
set -u
pools=(heavy-io cpu-analysis network-light); sizes=(3 2 6)
for ((i = ${lane}; i < ${RUNS}; i += ${CONCURRENCY})); do
  p=$((i % 3)); pool=\${pools[$p]}
  until
    taken=1
    for ((s = 0; s < \${sizes[$p]}; s++)); do
      if ( flock -n 9 || exit 99; /bin/true >> "${root}/bash-$i.log" 2>&1; echo $? > "${root}/bash-${lane}.status" ) 9> "${lockDir}/$pool/slot_$s.lock"; then taken=0; break; fi
    done
    [ $taken = 0 ]
  do sleep 0.01; done
done`;
  const started = process.hrtime.bigint();
  return Promise.all(
    Array.from(
      { length: CONCURRENCY },
      (_, lane) =>
        new Promise<void>((resolve, reject) => {
          const child = spawn('bash', ['-c', loop(lane)], { stdio: 'inherit' });
          child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`bash loop ${lane} failed with ${code}`))));
        }),
    ),
  )
    .then(() => RUNS / (Number(process.hrtime.bigint() - started) / 1e9))
    .finally(() => removeAtExit(root));
}

/** CPU milliseconds (user + system) of a process's main thread, or with `all` of all its threads. */
function cpuMs(pid: number, all = false): number {
  const stat = fs.readFileSync(all ? `/proc/${pid}/stat` : `/proc/${pid}/task/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/**
 * Milliseconds a thread has spent runnable but waiting for a CPU (the second field of
 * /proc/<pid>/task/<tid>/schedstat, in ns); null where the kernel keeps no such count.
 */
function runQueueWaitMs(pid: number): number | null {
  try {
    const waitNs = Number(fs.readFileSync(`/proc/${pid}/task/${pid}/schedstat`, 'utf8').split(' ')[1]);
    return Number.isFinite(waitNs) ? waitNs / 1e6 : null;
  } catch {
    return null;
  }
}

/** /proc/stat counts in USER_HZ ticks, 100 a second on Linux whatever the kernel's own tick rate. */
const USER_HZ = 100;

/** The machine's cores, which the runs, the agent and this benchmark share. */
const CORES = os.cpus().length;

/** The machine's idle (with I/O wait) and total CPU time so far, in ticks (/proc/stat's first line). */
function machineTicks(): { idle: number; total: number } {
  const ticks = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  return { idle: ticks[3] + (ticks[4] ?? 0), total: ticks.reduce((a, b) => a + b, 0) };
}

/**
 * CPU milliseconds of the agent's native spawner (agent/native) and of what it reaped: its own, and
 * with its waited-for children (each run's waiter, and the fetcher the waiter reaped). null when the
 * agent has no spawner (QUANTILICA_SPAWNER=thread, or not built).
 */
function spawnerCpuMs(agentPid: number): { own: number; withRuns: number } | null {
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue;
    }
    if (!stat.includes('(quantilica-spaw')) continue;
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(fields[1]) !== agentPid) continue;
    const own = (Number(fields[11]) + Number(fields[12])) * 10;
    return { own, withRuns: own + (Number(fields[13]) + Number(fields[14])) * 10 };
  }
  return null;
}

/** Node's spawn ceiling and the bash+flock peer measured just before one more burst of the agent's. */
export interface WarmRound {
  ceiling: number;
  peer: number;
  burst: BurstFigures;
}

/** What one burst of queued runs cost the agent. */
export interface BurstFigures {
  runsPerSecond: number;
  cpuMsPerRun: number;
  processCpuMsPerRun: number;
  /** How long the agent's main thread was runnable but not running, per run (null without schedstats). */
  mainThreadWaitMsPerRun: number | null;
  /** The share of the machine's CPU time that was idle while the burst ran. */
  machineIdleShare: number;
  /** The machine's busy CPU time per run while the burst ran: every process and the kernel's threads. */
  machineCpuMsPerRun: number;
}

export interface AgentFigures {
  /**
   * The first burst after the agent started: its figures include V8 compiling the hot paths (about
   * half a second of CPU on the platform's threads, once per agent process), which a station's
   * agent, running for days, pays once. The figures below are the next burst's.
   */
  firstBurst: BurstFigures;
  /**
   * The warm rounds, when asked for (the first one's burst is the agent's third): V8 still optimizes
   * some ninety functions of the hot paths for the first time during the second burst, a sixth of the
   * agent's CPU there, and about as many again in the third (they become hot only after thousands of
   * runs). A station's agent, running for days, spends most of its bursts in the state of the last.
   */
  warmRounds: WarmRound[];
  runsPerSecond: number;
  cpuMsPerRun: number;
  processCpuMsPerRun: number;
  mainThreadWaitMsPerRun: number | null;
  machineIdleShare: number;
  machineCpuMsPerRun: number;
  spawnerCpuMsPerRun: number | null;
  spawnerWithRunsCpuMsPerRun: number | null;
  clientCpuMsPerRun: number;
  /** Median µs to make a file in the runs' log folder just before the measured burst (fileCreationMicros.ts). */
  fileCreationMicros: number;
  p50: number;
  p99: number;
  idleRssMb: number;
  /** RSS 5 s after the last of the burst's runs ended, before anything else is asked of the agent. */
  rssAfterBurstMb: number;
  /** Of it, the pages of mapped files (node's binary): shared, and resident as the page cache allows. */
  rssAfterBurstFileMb: number;
  idleRssAfterMb: number;
  /** The most RSS the agent had while the burst's runs were queued and ran (VmHWM); null if it could not be reset. */
  peakRssMb: number | null;
  /** How each pool's slots turned over in the measured burst, the pool whose last run ended first first. */
  slotCycles: SlotCycle[];
}

/** Sets the process's RSS high-water mark (VmHWM) to its RSS now; false when the kernel refuses. */
function resetPeakRss(pid: number): boolean {
  try {
    fs.writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
  }
}

function peakRss(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
}

export async function agentOverProtocol(idleSeconds: number, policy: EntryPolicy = {}, warmRounds = 0): Promise<AgentFigures> {
  const { root, env, connectionFile } = station(policy);
  const agent = await startAgent(env);
  const pid = agent.pid!;
  const client = await connectAgent(connectionFile, { client: 'bench' });
  try {
    const idle = await sampleIdle(pid, idleSeconds);
    // The spawner starts with the first run: a warm-up run makes it exist before the count begins.
    await client.waitRun((await client.run(POOLS[0][0])).runId);
    const burst = async () => {
      const cpuBefore = cpuMs(pid);
      const processCpuBefore = cpuMs(pid, true);
      const waitBefore = runQueueWaitMs(pid);
      const machineBefore = machineTicks();
      const startedAtMs = Date.now();
      const started = process.hrtime.bigint();
      const done = await Promise.all(
        Array.from({ length: RUNS }, async (_, i) => client.waitRun((await client.run(POOLS[i % POOLS.length][0])).runId)),
      );
      const waitAfter = runQueueWaitMs(pid);
      const machineAfter = machineTicks();
      const figures: BurstFigures = {
        runsPerSecond: RUNS / (Number(process.hrtime.bigint() - started) / 1e9),
        cpuMsPerRun: (cpuMs(pid) - cpuBefore) / RUNS,
        // Every thread's (the spawn worker's, libuv's pool doing the spool's fsyncs, the GC's, V8's compiler's).
        processCpuMsPerRun: (cpuMs(pid, true) - processCpuBefore) / RUNS,
        mainThreadWaitMsPerRun: waitAfter === null || waitBefore === null ? null : (waitAfter - waitBefore) / RUNS,
        machineIdleShare: (machineAfter.idle - machineBefore.idle) / Math.max(1, machineAfter.total - machineBefore.total),
        machineCpuMsPerRun: ((machineAfter.total - machineAfter.idle - (machineBefore.total - machineBefore.idle)) * 1000) / USER_HZ / RUNS,
      };
      return { done, figures, startedAtMs };
    };
    const first = await burst();
    const firstFailed = first.done.filter((r) => r.status !== 'completed');
    if (firstFailed.length > 0)
      throw new Error(`${firstFailed.length} runs of the first burst did not complete: ${JSON.stringify(firstFailed[0])}`);
    const firstBurst = first.figures;
    // The agent idle again before the measured burst, as between two bursts of a station's day.
    await sampleIdle(pid, Math.min(idleSeconds, 3));
    // What the filesystem asks for the files each run makes, in the logs' folder, just before the burst makes them.
    const fileMicros = fileCreationMicros(path.join(root, 'data', 'logs'));
    // The peak from here on is the burst's: the whole queue is in the agent at once.
    const peakReset = resetPeakRss(pid);
    const clientCpuBefore = process.cpuUsage();
    const spawnerBefore = spawnerCpuMs(pid);
    const { done, figures, startedAtMs } = await burst();
    const spawnerAfter = spawnerCpuMs(pid);
    const client2 = process.cpuUsage(clientCpuBefore);
    // This benchmark's own process (the protocol client): it shares the machine's 2 cores with the agent.
    const clientCpuMsPerRun = (client2.user + client2.system) / 1000 / RUNS;
    const peakRssMb = peakReset ? peakRss(pid) : null;
    // Memory after the burst: what the queued runs' objects leave behind once they all ended.
    const rssAfterBurst = await sampleIdle(pid, 5);
    const failed = done.filter((r) => r.status !== 'completed');
    if (failed.length > 0) throw new Error(`${failed.length} runs did not complete: ${JSON.stringify(failed[0])}`);
    // The policy reached the runs: each carries its retry policy's attempts (and ran its one try).
    const attempts = (policy.retry as { attempts?: number } | undefined)?.attempts ?? 1;
    const unpolicied = done.filter((r) => (r.attempts ?? 1) !== attempts || (r.attempt ?? 1) !== 1);
    if (unpolicied.length > 0)
      throw new Error(`${unpolicied.length} runs without the policy's ${attempts} attempts: ${JSON.stringify(unpolicied[0])}`);
    const cycles = slotCycles(done, startedAtMs);
    const cycled = cycles.reduce((n, c) => n + c.runs, 0);
    if (cycled !== RUNS) throw new Error(`the slot cycles cover ${cycled} of the burst's ${RUNS} runs`);
    // Enqueue→spawn with a free slot: from the request leaving the client to the run's recorded start
    // (after its spawn), same clock.
    const latencies: number[] = [];
    for (let i = 0; i < Math.min(200, RUNS); i++) {
      const sent = Date.now();
      const run = await client.run('noop-light');
      const ended = await client.waitRun(run.runId);
      if (ended.startedAt) latencies.push(Date.parse(ended.startedAt) - sent);
    }
    // Idle again once it has worked (its spawn thread started, its caches filled).
    const after = await sampleIdle(pid, Math.min(idleSeconds, 5));
    const rounds: WarmRound[] = [];
    for (let i = 0; i < warmRounds; i++) {
      // The agent idles meanwhile, as between its bursts above.
      const ceiling = await spawnCeiling();
      const peer = await bashPeer();
      const warm = await burst();
      const warmFailed = warm.done.filter((r) => r.status !== 'completed');
      if (warmFailed.length > 0)
        throw new Error(`${warmFailed.length} runs of warm round ${i + 1} did not complete: ${JSON.stringify(warmFailed[0])}`);
      rounds.push({ ceiling, peer, burst: warm.figures });
    }
    return {
      firstBurst,
      warmRounds: rounds,
      ...figures,
      clientCpuMsPerRun,
      fileCreationMicros: fileMicros,
      spawnerCpuMsPerRun: spawnerBefore && spawnerAfter ? (spawnerAfter.own - spawnerBefore.own) / RUNS : null,
      spawnerWithRunsCpuMsPerRun: spawnerBefore && spawnerAfter ? (spawnerAfter.withRuns - spawnerBefore.withRuns) / RUNS : null,
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      idleRssMb: idle.rssMb,
      rssAfterBurstMb: rssAfterBurst.rssMb,
      rssAfterBurstFileMb: rssAfterBurst.fileRssMb,
      idleRssAfterMb: after.rssMb,
      peakRssMb,
      slotCycles: cycles,
    };
  } finally {
    await client.close();
    await stopAgent(agent, root);
  }
}

async function main(): Promise<void> {
  const ceiling = await spawnCeiling();
  const wrapperCeiling = await spawnCeiling(true);
  const bash = await bashPeer();
  const agent = await agentOverProtocol(IDLE_SECONDS, {}, WARM_ROUNDS);
  const ceilingAfter = await spawnCeiling();
  const third = agent.warmRounds[0].burst;
  const last = agent.warmRounds[agent.warmRounds.length - 1].burst;
  const median = (of: (r: WarmRound) => number) => round(percentile(agent.warmRounds.map(of), 50));
  const result = {
    runs: RUNS,
    spawnCeilingRunsPerSecond: round(ceiling),
    spawnCeilingAfterRunsPerSecond: round(ceilingAfter),
    bashRunsPerSecond: round(bash),
    // The first burst after the agent started (V8 still compiling its hot paths), then the measured one.
    firstBurstRunsPerSecond: round(agent.firstBurst.runsPerSecond),
    firstBurstShareOfCeiling: round(agent.firstBurst.runsPerSecond / ((ceiling + ceilingAfter) / 2)),
    firstBurstToBash: round(agent.firstBurst.runsPerSecond / bash),
    firstBurstMainThreadCpuMsPerRun: round(agent.firstBurst.cpuMsPerRun),
    firstBurstProcessCpuMsPerRun: round(agent.firstBurst.processCpuMsPerRun),
    thirdBurstRunsPerSecond: round(third.runsPerSecond),
    thirdBurstMainThreadCpuMsPerRun: round(third.cpuMsPerRun),
    thirdBurstProcessCpuMsPerRun: round(third.processCpuMsPerRun),
    // Each warm round's burst against the ceiling and the peer of its own minute; medians over the rounds.
    warmRounds: agent.warmRounds.length,
    warmRunsPerSecond: median((r) => r.burst.runsPerSecond),
    warmShareOfCeiling: median((r) => r.burst.runsPerSecond / r.ceiling),
    warmToBash: median((r) => r.burst.runsPerSecond / r.peer),
    warmMainThreadCpuMsPerRun: median((r) => r.burst.cpuMsPerRun),
    warmProcessCpuMsPerRun: median((r) => r.burst.processCpuMsPerRun),
    lastWarmMainThreadCpuMsPerRun: round(last.cpuMsPerRun),
    lastWarmProcessCpuMsPerRun: round(last.processCpuMsPerRun),
    warmRoundFigures: agent.warmRounds.map((r) => ({
      ceiling: round(r.ceiling),
      peer: round(r.peer),
      runsPerSecond: round(r.burst.runsPerSecond),
      mainThreadCpuMsPerRun: round(r.burst.cpuMsPerRun),
      processCpuMsPerRun: round(r.burst.processCpuMsPerRun),
    })),
    agentRunsPerSecond: round(agent.runsPerSecond),
    agentShareOfCeiling: round(agent.runsPerSecond / ((ceiling + ceilingAfter) / 2)),
    agentToBash: round(agent.runsPerSecond / bash),
    forkIsFast: (ceiling + ceilingAfter) / 2 >= FAST_FORK_RUNS_PER_SECOND,
    wrapperCeilingRunsPerSecond: round(wrapperCeiling),
    agentShareOfWrapperCeiling: round(agent.runsPerSecond / wrapperCeiling),
    spawnLatencyP50Ms: round(agent.p50),
    spawnLatencyP99Ms: round(agent.p99),
    mainThreadCpuMsPerRun: round(agent.cpuMsPerRun),
    mainThreadWaitMsPerRun: agent.mainThreadWaitMsPerRun === null ? null : round(agent.mainThreadWaitMsPerRun),
    machineIdleShare: round(agent.machineIdleShare),
    machineCpuMsPerRun: round(agent.machineCpuMsPerRun),
    processCpuMsPerRun: round(agent.processCpuMsPerRun),
    spawnerCpuMsPerRun: agent.spawnerCpuMsPerRun === null ? null : round(agent.spawnerCpuMsPerRun),
    spawnerWithRunsCpuMsPerRun: agent.spawnerWithRunsCpuMsPerRun === null ? null : round(agent.spawnerWithRunsCpuMsPerRun),
    clientCpuMsPerRun: round(agent.clientCpuMsPerRun),
    fileCreationMicros: round(agent.fileCreationMicros),
    spawner: process.env.QUANTILICA_SPAWNER ?? 'native',
    idleRssMb: round(agent.idleRssMb),
    rssAfterBurstMb: round(agent.rssAfterBurstMb),
    rssAfterBurstFileMb: round(agent.rssAfterBurstFileMb),
    idleRssAfterRunsMb: round(agent.idleRssAfterMb),
    peakRssDuringBurstMb: agent.peakRssMb === null ? null : round(agent.peakRssMb),
    // What each queued run cost at the queue's longest, over the idle agent.
    peakKbPerQueuedRun: agent.peakRssMb === null ? null : round(((agent.peakRssMb - agent.idleRssMb) * 1024) / RUNS),
    slotCycles: agent.slotCycles.map((c) => ({
      ...c,
      lastEndMs: Math.round(c.lastEndMs),
      spawnToEndMs: round(c.spawnToEndMs),
      endToSpawnMs: round(c.endToSpawnMs),
    })),
    loadAverage: os.loadavg().map(round),
  };
  printTable(`slots benchmark, ${RUNS} no-op runs, load average ${result.loadAverage.join(' ')}`, [
    [
      'Node spawn ceiling (/bin/true, 11 at a time)',
      `${result.spawnCeilingRunsPerSecond} runs/s`,
      `(${result.spawnCeilingAfterRunsPerSecond} after the agent)`,
    ],
    ['bash + flock peer (11 polling loops)', `${result.bashRunsPerSecond} runs/s`, ''],
    [
      "agent's first burst after its start",
      `${result.firstBurstRunsPerSecond} runs/s`,
      `${Math.round(result.firstBurstShareOfCeiling * 100)} % of the ceiling, ${result.firstBurstToBash}x the peer; CPU per run ${result.firstBurstMainThreadCpuMsPerRun} ms main thread, ${result.firstBurstProcessCpuMsPerRun} ms all threads (V8 compiling)`,
    ],
    ['agent over its protocol (the next burst: the figures below)', `${result.agentRunsPerSecond} runs/s`, ''],
    [
      'agent / spawn ceiling',
      `${Math.round(result.agentShareOfCeiling * 100)} %`,
      `target >= ${result.forkIsFast ? 60 : 80} % (fork is ${result.forkIsFast ? 'fast' : 'slow'} here)`,
    ],
    ['agent / bash + flock peer', `${result.agentToBash}x`, ''],
    [
      'wrapper ceiling (/bin/true under runWrapper.sh, 11 at a time)',
      `${result.wrapperCeilingRunsPerSecond} runs/s`,
      `${Math.round((result.wrapperCeilingRunsPerSecond / ((result.spawnCeilingRunsPerSecond + result.spawnCeilingAfterRunsPerSecond) / 2)) * 100)} % of the spawn ceiling`,
    ],
    ['agent / wrapper ceiling', `${Math.round(result.agentShareOfWrapperCeiling * 100)} %`, ''],
    // The burst lasts as long as its busiest slots turn over: with runs spread evenly over the pools,
    // the pool with the fewest slots ends last, and its cycle (spawn to end, end to the next spawn) is
    // the agent's latency, not its CPU, once the other pools are done.
    ...result.slotCycles.map((c): [string, string, string] => [
      `slots of ${c.pool} (${c.slots}, ${c.runs} runs): last end`,
      `${c.lastEndMs} ms`,
      `per run on a slot: ${c.spawnToEndMs} ms spawn → end, ${c.endToSpawnMs} ms end → next spawn`,
    ]),
    ['enqueue→spawn p50', `${result.spawnLatencyP50Ms} ms`, ''],
    ['enqueue→spawn p99', `${result.spawnLatencyP99Ms} ms`, 'target < 20 ms'],
    ['main-thread CPU per run', `${result.mainThreadCpuMsPerRun} ms`, ''],
    // Where the burst's time went besides the agent's own CPU: its main thread runnable behind the
    // runs, the spawner and the client on the same cores, or the cores idle between wake-ups.
    [
      'main thread runnable, waiting for a CPU, per run',
      result.mainThreadWaitMsPerRun === null ? 'unknown' : `${result.mainThreadWaitMsPerRun} ms`,
      `the machine was ${Math.round(result.machineIdleShare * 100)} % idle during the burst`,
    ],
    ['agent CPU per run, all threads', `${result.processCpuMsPerRun} ms`, `target <= 1 ms; spawner: ${result.spawner}`],
    [
      "agent's third burst (the first warm round's)",
      `${result.thirdBurstRunsPerSecond} runs/s`,
      `CPU per run ${result.thirdBurstMainThreadCpuMsPerRun} ms main thread, ${result.thirdBurstProcessCpuMsPerRun} ms all threads`,
    ],
    [
      `warm rounds (${result.warmRounds}: the ceiling, the peer, a burst), medians`,
      `${result.warmRunsPerSecond} runs/s`,
      `${Math.round(result.warmShareOfCeiling * 100)} % of the round's ceiling, ${result.warmToBash}x the round's peer; ` +
        `CPU per run ${result.warmMainThreadCpuMsPerRun} ms main thread, ${result.warmProcessCpuMsPerRun} ms all threads`,
    ],
    [
      'the last warm round (V8 the warmest)',
      `${result.warmRoundFigures[result.warmRoundFigures.length - 1].runsPerSecond} runs/s`,
      `CPU per run ${result.lastWarmMainThreadCpuMsPerRun} ms main thread, ${result.lastWarmProcessCpuMsPerRun} ms all threads`,
    ],
    [
      'native spawner CPU per run: its own / with waiters and fetchers',
      result.spawnerCpuMsPerRun === null ? 'none' : `${result.spawnerCpuMsPerRun} / ${result.spawnerWithRunsCpuMsPerRun} ms`,
      '',
    ],
    ["this benchmark's client CPU per run (same 2 cores)", `${result.clientCpuMsPerRun} ms`, ''],
    // The bound when every core is busy: a run's CPU on the whole machine, and what of it no process
    // above accounts for (the kernel's threads: a cgroup's teardown, RCU; the machine's other tenants).
    [
      'machine CPU per run, every process',
      `${result.machineCpuMsPerRun} ms`,
      `the rest (kernel threads, other tenants) ${
        result.spawnerWithRunsCpuMsPerRun === null
          ? 'unknown'
          : `${round(result.machineCpuMsPerRun - result.processCpuMsPerRun - result.spawnerWithRunsCpuMsPerRun - result.clientCpuMsPerRun)} ms`
      }; ${CORES} cores busy would allow ${Math.round((CORES * 1000) / Math.max(0.01, result.machineCpuMsPerRun))} runs/s`,
    ],
    [
      "making a file in the runs' log folder (median)",
      `${result.fileCreationMicros} µs`,
      'each run makes two (its log, its status file); dearer soon after many files were deleted there',
    ],
    ['idle RSS before the burst', `${result.idleRssMb} MB`, 'target < 80 MB'],
    [
      `peak RSS while the ${RUNS} runs were queued and ran`,
      result.peakRssDuringBurstMb === null ? 'unknown' : `${result.peakRssDuringBurstMb} MB`,
      result.peakKbPerQueuedRun === null ? '' : `${result.peakKbPerQueuedRun} KB per queued run over the idle agent`,
    ],
    [
      'RSS 5 s after the burst ends',
      `${result.rssAfterBurstMb} MB`,
      `target < 80 MB; ${result.rssAfterBurstFileMb} MB of it mapped files (node's binary)`,
    ],
    ['idle RSS after the runs', `${result.idleRssAfterRunsMb} MB`, 'target < 80 MB'],
  ]);
  process.stdout.write(`${JSON.stringify({ bench: 'slots', ...result })}\n`);
}

export function round(n: number): number {
  return Math.round(n * 100) / 100;
}

// Imported by slotsPolicies.ts for its parts: only run when started as the benchmark itself.
if (require.main === module) {
  main().catch((err: unknown) => {
    process.stderr.write(`${String(err)}\n`);
    process.exitCode = 1;
  });
}
