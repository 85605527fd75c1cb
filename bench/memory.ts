import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { openCore } from '../agent/compose/openCore';
import { loadConfig } from '../agent/config/config';
import { createLogger } from '../agent/log/logger';
import { MemoryCeilings } from '../agent/memory/memoryCeilings';
import { benchNumber, percentile, printTable } from './benchSupport';

// The memory ceilings' benchmark: what a run's cgroup costs. The same 1,000 no-op runs through the three pools
// (11 slots) and the same enqueue→spawn latency as the slots benchmark, once with a cgroup per run
// (made before the spawn, joined by the wrapper, read and removed at the end) and once without
// (QUANTILICA_MEMORY_ENFORCE=false: memory sampled from /proc). Needs root for the cgroup half.
// Run: npm run bench -- memory   (or node out/bench/memory.js [runs])

const RUNS = benchNumber('the count of runs', process.argv[2], 1000, { min: 1, max: 1_000_000, whole: true });
const POOLS = [
  ['noop-heavy', 'heavy-io'],
  ['noop-cpu', 'cpu-analysis'],
  ['noop-light', 'network-light'],
] as const;
const CGROUP_NAME = `qbench-memory-${process.pid}`;

interface Figures {
  runsPerSecond: number;
  p50: number;
  p99: number;
  enforcement: string;
}

async function measure(enforce: boolean): Promise<Figures> {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qbench-mem-'));
  const catalog = path.join(root, 'catalog.json');
  fs.writeFileSync(catalog, JSON.stringify({ fetchers: POOLS.map(([name, pool]) => ({ name, pool, argv: ['true'] })) }));
  const env = {
    ...process.env,
    HOME: path.join(root, 'home'),
    QUANTILICA_LOCK_DIR: path.join(root, 'locks'),
    DATA_DIR: path.join(root, 'data'),
    CRON_USE_POOLS: 'true',
    QUANTILICA_CATALOG: catalog,
    QUANTILICA_LOG_LEVEL: 'error',
    CRON_DISK_PAUSE_GB: '0.0001',
    CRON_DISK_WARN_GB: '0.0002',
    CRON_DISK_RESUME_GB: '0.0002',
    QUANTILICA_MEMORY_ENFORCE: String(enforce),
    QUANTILICA_CGROUP_NAME: CGROUP_NAME,
  };
  const config = loadConfig(env);
  const logger = createLogger('bench', 'error');
  const core = openCore(config, logger);
  const orchestrator = core.control;
  const enforcement = orchestrator.agentInfo().memory?.kind ?? 'unknown';
  try {
    const started = process.hrtime.bigint();
    const runs = await Promise.all(Array.from({ length: RUNS }, (_, i) => orchestrator.run(POOLS[i % POOLS.length][0], [], 'cli')));
    const done = await Promise.all(runs.map((r) => orchestrator.waitRun(r.runId)));
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    const failed = done.filter((r) => r.status !== 'completed');
    if (failed.length > 0) throw new Error(`${failed.length} runs did not complete: ${JSON.stringify(failed[0])}`);

    const latencies: number[] = [];
    let enqueuedAt = 0n;
    const off = orchestrator.hub.onChange(({ change }) => {
      if (change.kind === 'run' && change.run.status === 'running') latencies.push(Number(process.hrtime.bigint() - enqueuedAt) / 1e6);
    });
    for (let i = 0; i < 200; i++) {
      enqueuedAt = process.hrtime.bigint();
      await orchestrator.waitRun((await orchestrator.run('noop-light', [], 'cli')).runId);
    }
    off();
    return { runsPerSecond: RUNS / seconds, p50: percentile(latencies, 50), p99: percentile(latencies, 99), enforcement };
  } finally {
    await core.close();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

/** The cgroup work alone, per run: make (3 v1 hierarchies, the limit), read the figures, remove. */
async function cgroupCostMs(samples: number): Promise<number[]> {
  const ceilings = new MemoryCeilings({
    pools: new Map([['heavy-io', 1024]]),
    reserveMb: 0,
    cgroupName: CGROUP_NAME,
    homeDir: process.cwd(),
    logger: createLogger('bench', 'error'),
  });
  const out: number[] = [];
  for (let i = 0; i < samples; i++) {
    const started = process.hrtime.bigint();
    await ceilings.prepare(`bench-${i}`, 'heavy-io', 256);
    ceilings.release(`bench-${i}`);
    out.push(Number(process.hrtime.bigint() - started) / 1e6);
  }
  ceilings.close();
  return out;
}

/** The bench's own pool folders (run folders are removed as runs end). */
function removeCgroups(): void {
  for (const hierarchy of ['memory', 'cpuacct', 'freezer']) {
    const base = path.join('/sys/fs/cgroup', hierarchy, CGROUP_NAME);
    if (!fs.existsSync(base)) continue;
    for (const d of fs.readdirSync(base, { withFileTypes: true })) if (d.isDirectory()) fs.rmdirSync(path.join(base, d.name));
    fs.rmdirSync(base);
  }
}

async function main(): Promise<void> {
  try {
    const without = await measure(false);
    const withCgroup = await measure(true);
    const cost = await cgroupCostMs(500);
    const r = (n: number) => Math.round(n * 100) / 100;
    const result = {
      runs: RUNS,
      enforcement: withCgroup.enforcement,
      cgroupRunsPerSecond: r(withCgroup.runsPerSecond),
      plainRunsPerSecond: r(without.runsPerSecond),
      cgroupSpawnP50Ms: r(withCgroup.p50),
      cgroupSpawnP99Ms: r(withCgroup.p99),
      plainSpawnP50Ms: r(without.p50),
      plainSpawnP99Ms: r(without.p99),
      cgroupWorkP50Ms: r(percentile(cost, 50)),
      cgroupWorkP99Ms: r(percentile(cost, 99)),
      loadAverage: r(os.loadavg()[0]),
    };
    printTable(`memory ceilings benchmark: a cgroup per run (${result.enforcement}) against none`, [
      ['throughput with cgroups', `${result.cgroupRunsPerSecond} runs/s`, `without: ${result.plainRunsPerSecond} runs/s`],
      ['enqueue→spawn p50 with', `${result.cgroupSpawnP50Ms} ms`, `without: ${result.plainSpawnP50Ms} ms`],
      ['enqueue→spawn p99 with', `${result.cgroupSpawnP99Ms} ms`, `without: ${result.plainSpawnP99Ms} ms (slots target < 20 ms)`],
      ['cgroup make+read+remove p50', `${result.cgroupWorkP50Ms} ms`, 'per run, alone'],
      ['cgroup make+read+remove p99', `${result.cgroupWorkP99Ms} ms`, `(load average ${result.loadAverage})`],
    ]);
    process.stdout.write(`${JSON.stringify({ bench: 'memory', ...result })}\n`);
  } finally {
    removeCgroups();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${String(err)}\n`);
  process.exitCode = 1;
});
