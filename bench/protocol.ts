import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as readline from 'node:readline';
import { connectAgent, type AgentClient } from '../agent/client/agentClient';
import { benchNumber, percentile, printTable, sampleIdle } from './benchSupport';

// The protocol benchmark, against the real agent (`quantilica agent`, a separate process):
// - latency from a slot change in the agent (the holder's `since`, written when the agent takes the
//   slot) to the pool change event at each of 10 clients, while 100 or more runs wait;
// - the agent's CPU and RSS with 10 idle clients (and with none, for comparison).
// Targets: p99 under 100 ms; idle CPU under 1 %.
// Run: npm run build && npx tsc -b && node out/bench/protocol.js [transitions]

const CLIENTS = 10;
const TRANSITIONS = benchNumber('the count of transitions', process.argv[2], 150, { min: 1, max: 100_000, whole: true });
const WAITING = 100;
const SLOTS = 2;
const IDLE_SECONDS = benchNumber('BENCH_IDLE_SECONDS', process.env.BENCH_IDLE_SECONDS, 20, { min: 0, max: 3600 });
const AGENT_JS = path.resolve(__dirname, '..', '..', 'dist', 'agent.js');

function station() {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qbench-protocol-'));
  const catalog = path.join(root, 'catalog.json');
  // One fetcher per run, so no run is refused as a duplicate; each holds its slot for 0.2 s.
  const count = TRANSITIONS + WAITING + SLOTS;
  const fetchers = Array.from({ length: count }, (_, i) => ({
    name: `bench-${String(i).padStart(4, '0')}`,
    pool: 'network-light',
    argv: ['/bin/sleep', '0.2'],
  }));
  fs.writeFileSync(catalog, JSON.stringify({ fetchers }));
  const env = {
    ...process.env,
    HOME: path.join(root, 'home'),
    QUANTILICA_LOCK_DIR: path.join(root, 'locks'),
    DATA_DIR: path.join(root, 'data'),
    CRON_USE_POOLS: 'true',
    CRON_POOL_NETWORK_LIGHT_SLOTS: String(SLOTS),
    QUANTILICA_CATALOG: catalog,
    QUANTILICA_LOG_LEVEL: 'warn',
    QUANTILICA_SCHEDULE_CATCH_UP: 'false',
    CRON_DISK_PAUSE_GB: '0.0001',
    CRON_DISK_WARN_GB: '0.0002',
    CRON_DISK_RESUME_GB: '0.0002',
  };
  return { root, env, fetchers: fetchers.map((f) => f.name), connectionFile: path.join(root, 'home', '.quantilica', 'agent.json') };
}

async function startAgent(env: NodeJS.ProcessEnv): Promise<ChildProcess> {
  const child = spawn(process.execPath, [AGENT_JS, 'agent'], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = readline.createInterface({ input: child.stdout });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the agent was not ready within 30 s')), 30_000);
    child.once('exit', (code) => reject(new Error(`the agent exited with ${code}`)));
    lines.on('line', (line) => {
      if (line.includes('"ready":true')) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  return child;
}

/** Milliseconds from each new slot holder's `since` to the pool change arriving at this client. */
function watchSlotChanges(client: AgentClient, latencies: number[], counted: () => boolean): void {
  const seen = new Set<string>();
  client.onChanged((event) => {
    if (event.kind !== 'change' || event.params.change.kind !== 'pool' || !counted()) return;
    const received = Date.now();
    for (const slot of event.params.change.pool.slots) {
      const holder = slot.holder;
      if (!holder?.runId || !holder.since || seen.has(holder.runId)) continue;
      seen.add(holder.runId);
      latencies.push(received - Date.parse(holder.since));
    }
  });
}

async function main(): Promise<void> {
  const { root, env, fetchers, connectionFile } = station();
  const agent = await startAgent(env);
  const pid = agent.pid!;
  try {
    const noClients = await sampleIdle(pid, IDLE_SECONDS);
    const clients = await Promise.all(Array.from({ length: CLIENTS }, (_, i) => connectAgent(connectionFile, { client: `bench-${i}` })));
    const idle = await sampleIdle(pid, IDLE_SECONDS);

    const latencies: number[] = [];
    const driver = clients[0];
    let waiting = 0;
    driver.onChanged(() => {
      waiting = driver.snapshot.runs.filter((r) => r.status === 'waiting').length;
    });
    // Only slot changes that happen while at least WAITING runs wait are counted.
    for (const client of clients) watchSlotChanges(client, latencies, () => waiting >= WAITING);
    const runs = [];
    for (const name of fetchers) runs.push(await driver.run(name));
    await Promise.all(runs.map((r) => driver.waitRun(r.runId)));

    printTable(
      `protocol: ${CLIENTS} clients, ${runs.length} runs through ${SLOTS} slots (${latencies.length} slot-change events counted while ≥ ${WAITING} runs waited)`,
      [
        ['slot change → event, p50', `${percentile(latencies, 50).toFixed(1)} ms`, ''],
        ['slot change → event, p99', `${percentile(latencies, 99).toFixed(1)} ms`, 'target < 100 ms'],
        ['slot change → event, max', `${Math.max(...latencies).toFixed(1)} ms`, ''],
        [`agent CPU, idle, ${CLIENTS} clients`, `${idle.cpuPercent.toFixed(2)} %`, `target < 1 % (over ${IDLE_SECONDS} s)`],
        [`agent RSS, idle, ${CLIENTS} clients`, `${idle.rssMb.toFixed(0)} MB`, ''],
        ['agent CPU, idle, no client', `${noClients.cpuPercent.toFixed(2)} %`, ''],
        ['agent RSS, idle, no client', `${noClients.rssMb.toFixed(0)} MB`, ''],
      ],
    );
    const r = (n: number) => Math.round(n * 100) / 100;
    process.stdout.write(
      `${JSON.stringify({
        bench: 'protocol',
        clients: CLIENTS,
        runs: runs.length,
        slots: SLOTS,
        events: latencies.length,
        slotChangeP50Ms: r(percentile(latencies, 50)),
        slotChangeP99Ms: r(percentile(latencies, 99)),
        slotChangeMaxMs: r(Math.max(...latencies)),
        idleCpuPercent10Clients: r(idle.cpuPercent),
        idleRssMb10Clients: r(idle.rssMb),
        idleCpuPercentNoClient: r(noClients.cpuPercent),
        idleRssMbNoClient: r(noClients.rssMb),
        loadAverage: os.loadavg().map(r),
      })}\n`,
    );
    await Promise.all(clients.map((c) => c.close()));
  } finally {
    const exited = new Promise((resolve) => agent.once('exit', resolve));
    agent.kill('SIGTERM');
    await exited;
    fs.rmSync(root, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.stack : String(err));
  process.exitCode = 1;
});
