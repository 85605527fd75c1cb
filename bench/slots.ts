import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { loadConfig } from '../agent/config/config';
import { createLogger } from '../agent/log/logger';
import { openAgent } from '../agent/openAgent';
import { percentile, printTable, sampleIdle } from './benchSupport';

// Issue 2's benchmark: 1,000 runs of a no-op fetcher through the three pools (11 slots) by the
// agent's run machinery, against a bash loop doing the same with util-linux flock on the same slot
// files; enqueue→spawn latency with a free slot; the idle agent's RSS and CPU.
// Run: npm run build && npx tsc -b && node out/bench/slots.js [runs]

const RUNS = Number(process.argv[2] ?? 1000);
const POOLS = [['noop-heavy', 'heavy-io', 3], ['noop-cpu', 'cpu-analysis', 2], ['noop-light', 'network-light', 6]] as const;

function station() {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qbench-'));
  const catalog = path.join(root, 'catalog.json');
  fs.writeFileSync(catalog, JSON.stringify({ fetchers: POOLS.map(([name, pool]) => ({ name, pool, argv: ['true'] })) }));
  const env = { ...process.env, HOME: path.join(root, 'home'), QUANTILICA_LOCK_DIR: path.join(root, 'locks'), DATA_DIR: path.join(root, 'data'), CRON_USE_POOLS: 'true', QUANTILICA_CATALOG: catalog, QUANTILICA_LOG_LEVEL: 'warn', CRON_DISK_PAUSE_GB: '0.0001', CRON_DISK_WARN_GB: '0.0002', CRON_DISK_RESUME_GB: '0.0002' };
  return { root, env };
}

async function agentThroughput(): Promise<{ runsPerSecond: number; seconds: number }> {
  const { env } = station();
  const config = loadConfig(env);
  const logger = createLogger('bench', 'warn');
  const agent = openAgent(config, logger, { role: 'cli' });
  await agent.start();
  const orchestrator = agent.control;
  const started = process.hrtime.bigint();
  const runs = Array.from({ length: RUNS }, (_, i) => orchestrator.run(POOLS[i % POOLS.length][0], [], 'cli'));
  const done = await Promise.all(runs.map((r) => orchestrator.waitRun(r.runId)));
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const failed = done.filter((r) => r.status !== 'completed');
  if (failed.length > 0) throw new Error(`${failed.length} runs did not complete: ${JSON.stringify(failed[0])}`);
  await agent.close();
  return { runsPerSecond: RUNS / seconds, seconds };
}

/** Enqueue→spawn with a free slot: the agent's own overhead before the fetcher exists. */
async function spawnLatency(samples: number): Promise<number[]> {
  const { env } = station();
  const config = loadConfig(env);
  const logger = createLogger('bench', 'warn');
  const latencies: number[] = [];
  let enqueuedAt = 0n;
  const agent = openAgent(config, logger, { role: 'cli' });
  await agent.start();
  const orchestrator = agent.control;
  orchestrator.hub.onChange(({ change }) => {
    if (change.kind === 'run' && change.run.status === 'running') latencies.push(Number(process.hrtime.bigint() - enqueuedAt) / 1e6);
  });
  for (let i = 0; i < samples; i++) {
    enqueuedAt = process.hrtime.bigint();
    const run = orchestrator.run('noop-light', [], 'cli');
    await orchestrator.waitRun(run.runId);
  }
  await agent.close();
  return latencies;
}

/** The same work as cron_fetch.sh would do it: per run, find a free slot with flock -n, run the no-op
 * with its output appended to a log, record its exit status. */
function bashLoop(): { runsPerSecond: number; seconds: number } {
  const { root } = station();
  const lockDir = path.join(root, 'locks');
  for (const [, pool] of POOLS) fs.mkdirSync(path.join(lockDir, pool), { recursive: true });
  const script = `
set -u
pools=(heavy-io cpu-analysis network-light); sizes=(3 2 6)
for ((i = 0; i < ${RUNS}; i++)); do
  p=$((i % 3)); pool=\${pools[$p]}
  for ((s = 0; s < \${sizes[$p]}; s++)); do
    if ( flock -n 9 || exit 99; true >> "${root}/bash.log" 2>&1; echo $? > "${root}/bash.status" ) 9> "${lockDir}/$pool/slot_$s.lock"; then break; fi
  done
done`;
  const started = process.hrtime.bigint();
  const r = spawnSync('bash', ['-c', script], { stdio: 'inherit' });
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  if (r.status !== 0) throw new Error(`bash loop failed with ${r.status}`);
  return { runsPerSecond: RUNS / seconds, seconds };
}

async function idleAgent(seconds: number): Promise<{ rssMb: number; cpuPercent: number }> {
  const { env } = station();
  const child = spawn(process.execPath, [path.join(__dirname, '..', '..', 'dist', 'agent.js'), 'agent'], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => { if (d.toString().includes('"ready":true')) resolve(); });
    child.once('exit', (code) => reject(new Error(`agent exited with ${code}`)));
  });
  const idle = await sampleIdle(child.pid!, seconds);
  child.kill('SIGTERM');
  return idle;
}

async function main(): Promise<void> {
  const bash = bashLoop();
  const agent = await agentThroughput();
  const latencies = await spawnLatency(200);
  const idleSeconds = Number(process.env.BENCH_IDLE_SECONDS ?? 30);
  const idle = await idleAgent(idleSeconds);
  const result = {
    runs: RUNS,
    agentRunsPerSecond: round(agent.runsPerSecond),
    bashRunsPerSecond: round(bash.runsPerSecond),
    ratio: round(agent.runsPerSecond / bash.runsPerSecond),
    spawnLatencyP50Ms: round(percentile(latencies, 50)),
    spawnLatencyP99Ms: round(percentile(latencies, 99)),
    idleRssMb: round(idle.rssMb),
    idleCpuPercent: round(idle.cpuPercent),
    idleWindowSeconds: idleSeconds,
  };
  printTable('slots benchmark (issue 2)', [
    ['agent throughput', `${result.agentRunsPerSecond} runs/s`, ''],
    ['bash + flock loop', `${result.bashRunsPerSecond} runs/s`, ''],
    ['ratio', `${result.ratio}x`, 'target >= 3x'],
    ['enqueue→spawn p50', `${result.spawnLatencyP50Ms} ms`, ''],
    ['enqueue→spawn p99', `${result.spawnLatencyP99Ms} ms`, 'target < 20 ms'],
    ['idle RSS', `${result.idleRssMb} MB`, 'target < 80 MB'],
    ['idle CPU', `${result.idleCpuPercent} %`, 'target < 1 %'],
  ]);
  process.stdout.write(`${JSON.stringify({ bench: 'slots', ...result })}\n`);
}

function round(n: number): number {
  return Math.round(n * 100) / 100;
}

main().catch((err: unknown) => {
  process.stderr.write(`${String(err)}\n`);
  process.exitCode = 1;
});
