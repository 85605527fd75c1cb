import type { ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { connectAgent } from '../agent/client/agentClient';
import { startTestPostgres } from '../test/support/postgres';
import { benchNumber, benchStationEnv, printTable, startAgent, stopAgent } from './benchSupport';

// The postgres slot backend's throughput figure: no-op runs (/bin/true) through the three pools (3+2+6 slots): one
// station on the file backend for reference, then shared in PostgreSQL by one station, then by three stations (three agents, own homes and lock dirs, one
// database) each given a third of them.
// Run: npm run build && npx tsc -b && node out/bench/pgSlotsThroughput.js [runs]   (default 1000)

const RUNS = benchNumber('the count of runs', process.argv[2], 1000, { min: 1, max: 1_000_000, whole: true });
const POOLS = [
  ['noop-heavy', 'heavy-io'],
  ['noop-cpu', 'cpu-analysis'],
  ['noop-light', 'network-light'],
] as const;

function station(url: string, name: string, backend: 'file' | 'postgres') {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qbench-pgst-'));
  const catalog = path.join(root, 'catalog.json');
  fs.writeFileSync(catalog, JSON.stringify({ fetchers: POOLS.map(([fetcher, pool]) => ({ name: fetcher, pool, argv: ['/bin/true'] })) }));
  const env = {
    ...benchStationEnv(root, catalog),
    CRON_DISK_PAUSE_GB: '0.0001',
    CRON_DISK_WARN_GB: '0.0002',
    CRON_DISK_RESUME_GB: '0.0002',
    QUANTILICA_SLOT_BACKEND: backend,
    QUANTILICA_SLOT_DATABASE_URL: url,
    QUANTILICA_STATION: name,
  };
  return { root, env, connectionFile: path.join(root, 'home', '.quantilica', 'agent.json') };
}

async function throughput(url: string, stations: number, backend: 'file' | 'postgres' = 'postgres'): Promise<number> {
  const made = Array.from({ length: stations }, (_, i) => station(url, `bench-${stations}-${i}`, backend));
  const agents: ChildProcess[] = [];
  try {
    for (const s of made) agents.push(await startAgent(s.env));
    const started = process.hrtime.bigint();
    await Promise.all(
      made.map(async (s, i) => {
        const client = await connectAgent(s.connectionFile, { client: 'bench' });
        try {
          const mine = Array.from({ length: RUNS }, (_, n) => n).filter((n) => n % stations === i);
          const done = await Promise.all(mine.map(async (n) => client.waitRun((await client.run(POOLS[n % POOLS.length][0])).runId)));
          const failed = done.filter((r) => r.status !== 'completed');
          if (failed.length > 0) throw new Error(`${failed.length} runs did not complete: ${JSON.stringify(failed[0])}`);
        } finally {
          await client.close();
        }
      }),
    );
    return RUNS / (Number(process.hrtime.bigint() - started) / 1e9);
  } finally {
    await Promise.all(agents.map((a, i) => stopAgent(a, made[i].root)));
  }
}

async function main(): Promise<void> {
  const db = await startTestPostgres({ durable: true });
  try {
    const file = await throughput(db.url, 1, 'file');
    const one = await throughput(db.url, 1);
    const three = await throughput(db.url, 3);
    printTable(`${RUNS} no-op runs through 3+2+6 shared slots (${os.cpus().length} cores, load ${os.loadavg()[0].toFixed(1)})`, [
      ['one station, file backend', `${file.toFixed(2)} runs/s`, ''],
      ['one station', `${one.toFixed(2)} runs/s`, ''],
      ['three stations', `${three.toFixed(2)} runs/s`, '(all on this one machine)'],
    ]);
    process.stdout.write(
      `${JSON.stringify({ bench: 'pgSlotsThroughput', runs: RUNS, oneStationFile: file, oneStation: one, threeStations: three })}\n`,
    );
  } finally {
    await db.stop();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
