import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { connectAgent } from '../agent/client/agentClient';
import { toRunRow, type StoredRun } from '../agent/runs/runStore';
import { openAt } from '../agent/telemetry/openSpoolDatabase';
import { UPSERT_RUN } from '../agent/telemetry/spoolSql';
import type { RunStatus } from '../shared/protocol';
import { benchNumber, benchStationEnv, AGENT_JS, percentile, printTable, startAgent } from './benchSupport';

// The history benchmark: the agent with 100,000 ended runs in its run store (the spool's `runs`
// table, filled with the agent stopped, in one transaction through the store's own row shape and
// upsert) and retention raised so they stay, against the same agent with an empty store:
// - start: spawn of `quantilica agent` to its protocol answering a hello;
// - `status`: a snapshot over the protocol, 200 round trips on one connection;
// - `quantilica runs --limit 50`: the CLI, 20 invocations, wall time (a node process each).
// Targets with the full store: status p99 ≤ 20 ms, start ≤ 1 s, runs --limit 50 ≤ 50 ms.
// Run: npm run bench -- history   (or node out/bench/history.js [runs])

const RUNS = benchNumber('the count of runs', process.argv[2], 100_000, { min: 1, max: 10_000_000, whole: true });
const STATUS_CALLS = 200;
const CLI_CALLS = 20;
const FETCHERS = [
  ['comex', 'heavy-io', '0 3 * * *'],
  ['caged', 'heavy-io', '0 4 * * *'],
  ['ipca', 'network-light', '*/30 * * * *'],
  ['selic', 'network-light', '*/15 * * * *'],
  ['pnad', 'cpu-analysis', '0 5 * * 1'],
  ['siconfi', 'network-light', '0 * * * *'],
  ['anp-precos', 'network-light', '0 */2 * * *'],
  ['rais', 'heavy-io', '0 2 * * 0'],
] as const;

function station() {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qbench-history-'));
  const home = path.join(root, 'home');
  const catalog = path.join(root, 'catalog.json');
  fs.writeFileSync(
    catalog,
    JSON.stringify({ fetchers: FETCHERS.map(([name, pool, schedule]) => ({ name, pool, argv: ['/bin/true'], schedule })) }),
  );
  const env = {
    ...benchStationEnv(root, catalog, home),
    QUANTILICA_TELEMETRY_SPOOL: path.join(home, '.quantilica', 'telemetry_spool.db'),
    // Kept: every filled run is younger than a year and fewer than this many.
    QUANTILICA_RETENTION_DAYS: '365',
    QUANTILICA_RETENTION_RUNS: String(Math.max(5000, RUNS * 2)),
    CRON_DISK_PAUSE_GB: '0.0001',
    CRON_DISK_WARN_GB: '0.0002',
    CRON_DISK_RESUME_GB: '0.0002',
  };
  return { root, env, spool: env.QUANTILICA_TELEMETRY_SPOOL, connectionFile: path.join(home, '.quantilica', 'agent.json') };
}

const OUTCOMES: Array<[RunStatus, number]> = [
  ['completed', 0.85],
  ['failed', 0.1],
  ['cancelled', 0.03],
  ['skipped', 0.02],
];

function outcome(i: number): RunStatus {
  let x = ((i * 2654435761) % 1000) / 1000;
  for (const [status, share] of OUTCOMES) if ((x -= share) < 0) return status;
  return 'completed';
}

/** Ended runs as the agent leaves them, spread over the last 90 days, oldest first. */
function endedRun(i: number, now: number, logDir: string): StoredRun {
  const [fetcher, pool] = FETCHERS[i % FETCHERS.length];
  const enqueued = now - 90 * 86400_000 + Math.floor((i / RUNS) * 90 * 86400_000);
  const status = outcome(i);
  const ran = status !== 'skipped';
  const started = enqueued + 50 + (i % 7) * 10;
  const finished = started + 2000 + (i % 97) * 300;
  const runId = `${enqueued.toString(36)}-${randomBytes(4).toString('hex')}`;
  const failed = status === 'failed';
  return {
    runId,
    fetcher,
    pool,
    status,
    trigger: i % 5 === 0 ? 'cli' : 'schedule',
    args: [],
    enqueuedAt: new Date(enqueued).toISOString(),
    startedAt: ran ? new Date(started).toISOString() : null,
    finishedAt: new Date(ran ? finished : enqueued + 5).toISOString(),
    slot: ran ? i % 3 : null,
    pid: ran ? 10_000 + (i % 50_000) : null,
    exitCode: status === 'completed' ? 0 : failed ? 1 : null,
    signal: status === 'cancelled' ? 'SIGTERM' : null,
    reason: failed ? 'exit-code' : status === 'cancelled' ? 'cancelled' : status === 'skipped' ? 'already-active' : null,
    wait: null,
    logPath: ran ? path.join(logDir, `${fetcher}-${runId}.log`) : null,
    peakMemoryMb: ran ? 40 + (i % 400) : null,
    cpuSeconds: ran ? (i % 120) / 10 : null,
    memoryLimitMb: null,
    memorySource: 'sampled',
    attempt: 1,
    attempts: 1,
    oomKills: null,
    startTime: ran ? 1_000_000 + i : null,
    statusFile: ran ? path.join(logDir, `${runId}.exit`) : null,
    ownerPid: 4242,
    ownerStartTime: 123_456,
    ownerRole: i % 5 === 0 ? 'cli' : 'agent',
    waitSince: null,
  };
}

/** Writes `count` ended runs into the spool's run table in one transaction (the agent is stopped). */
function fill(spool: string, count: number, logDir: string): number {
  const started = process.hrtime.bigint();
  const db = openAt(spool);
  try {
    const upsert = db.prepare(UPSERT_RUN);
    const now = Date.now();
    db.transaction(() => {
      for (let i = 0; i < count; i++) upsert.run(toRunRow(endedRun(i, now, logDir)));
    })();
  } finally {
    db.close();
  }
  return Number(process.hrtime.bigint() - started) / 1e6;
}

async function timed<T>(call: () => Promise<T>): Promise<number> {
  const started = process.hrtime.bigint();
  await call();
  return Number(process.hrtime.bigint() - started) / 1e6;
}

function cli(env: NodeJS.ProcessEnv, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [AGENT_JS, ...args], { env, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.once('error', reject);
    child.once('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`quantilica ${args.join(' ')} exited with ${code}`))));
  });
}

interface Figures {
  startMs: number;
  statusP50: number;
  statusP99: number;
  runsP50: number;
  runsP99: number;
  /** The same listing as the CLI's request over the protocol: the agent's part of `runs --limit 50`. */
  listP50: number;
  listP99: number;
  listed: number;
}

async function measure(runs: number): Promise<Figures & { fillMs: number }> {
  const { root, env, spool, connectionFile } = station();
  try {
    const fillMs = runs > 0 ? fill(spool, runs, path.join(root, 'logs')) : 0;
    const started = process.hrtime.bigint();
    const agent = await startAgent(env);
    try {
      const client = await connectAgent(connectionFile, { client: 'bench-history' });
      const startMs = Number(process.hrtime.bigint() - started) / 1e6;
      try {
        const status: number[] = [];
        for (let i = 0; i < STATUS_CALLS; i++) status.push(await timed(() => client.getSnapshot()));
        const asked: number[] = [];
        for (let i = 0; i < STATUS_CALLS; i++) asked.push(await timed(() => client.listRuns(50)));
        const listing: number[] = [];
        let listed = 0;
        for (let i = 0; i < CLI_CALLS; i++) {
          const t0 = process.hrtime.bigint();
          const out = await cli(env, ['runs', '--limit', '50', '--json']);
          listing.push(Number(process.hrtime.bigint() - t0) / 1e6);
          listed = (JSON.parse(out) as { runs: unknown[] }).runs.length;
        }
        return {
          fillMs,
          startMs,
          statusP50: percentile(status, 50),
          statusP99: percentile(status, 99),
          runsP50: percentile(listing, 50),
          runsP99: percentile(listing, 99),
          listP50: percentile(asked, 50),
          listP99: percentile(asked, 99),
          listed,
        };
      } finally {
        await client.close();
      }
    } finally {
      const exited = new Promise((resolve) => agent.once('exit', resolve));
      agent.kill('SIGTERM');
      await exited;
    }
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
}

/** `node --version` wall time: the floor of any CLI invocation (a node process start). */
async function nodeFloorMs(): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < CLI_CALLS; i++) {
    const t0 = process.hrtime.bigint();
    await new Promise<void>((resolve, reject) => {
      const child = spawn(process.execPath, ['-e', '0'], { stdio: 'ignore' });
      child.once('error', reject);
      child.once('close', () => resolve());
    });
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  return percentile(times, 50);
}

async function main(): Promise<void> {
  const empty = await measure(0);
  const full = await measure(RUNS);
  const floor = await nodeFloorMs();
  const ms = (n: number) => `${n.toFixed(1)} ms`;
  const ratio = (a: number, b: number) => `×${(a / b).toFixed(2)} of empty`;
  printTable(`history: ${RUNS.toLocaleString('en')} ended runs in the run store (filled in ${ms(full.fillMs)}) against an empty store`, [
    ['agent start, empty store', ms(empty.startMs), 'spawn → hello answered'],
    ['agent start, full store', ms(full.startMs), `target ≤ 1000 ms, ${ratio(full.startMs, empty.startMs)}`],
    ['status p50, empty store', ms(empty.statusP50), `${STATUS_CALLS} snapshots over the protocol`],
    ['status p99, empty store', ms(empty.statusP99), ''],
    ['status p50, full store', ms(full.statusP50), ratio(full.statusP50, empty.statusP50)],
    ['status p99, full store', ms(full.statusP99), `target ≤ 20 ms, ${ratio(full.statusP99, empty.statusP99)}`],
    ['runs --limit 50 p50, empty store', ms(empty.runsP50), `${CLI_CALLS} CLI invocations, wall time`],
    ['runs --limit 50 p99, empty store', ms(empty.runsP99), ''],
    ['runs --limit 50 p50, full store', ms(full.runsP50), `target ≤ 50 ms, ${ratio(full.runsP50, empty.runsP50)}`],
    ['runs --limit 50 p99, full store', ms(full.runsP99), ratio(full.runsP99, empty.runsP99)],
    ['node -e 0, p50', ms(floor), 'the floor of any CLI invocation'],
    ['runs 50 over the protocol p50, empty store', ms(empty.listP50), `${STATUS_CALLS} requests: the agent's part of the CLI's call`],
    ['runs 50 over the protocol p99, empty store', ms(empty.listP99), ''],
    ['runs 50 over the protocol p50, full store', ms(full.listP50), ratio(full.listP50, empty.listP50)],
    ['runs 50 over the protocol p99, full store', ms(full.listP99), `target ≤ 50 ms, ${ratio(full.listP99, empty.listP99)}`],
  ]);
  const r = (n: number) => Math.round(n * 100) / 100;
  process.stdout.write(
    `${JSON.stringify({
      bench: 'history',
      runs: RUNS,
      listed: full.listed,
      fillMs: r(full.fillMs),
      startMsEmpty: r(empty.startMs),
      startMsFull: r(full.startMs),
      statusP50MsEmpty: r(empty.statusP50),
      statusP99MsEmpty: r(empty.statusP99),
      statusP50MsFull: r(full.statusP50),
      statusP99MsFull: r(full.statusP99),
      runsP50MsEmpty: r(empty.runsP50),
      runsP99MsEmpty: r(empty.runsP99),
      runsP50MsFull: r(full.runsP50),
      runsP99MsFull: r(full.runsP99),
      nodeFloorMs: r(floor),
      listP50MsEmpty: r(empty.listP50),
      listP99MsEmpty: r(empty.listP99),
      listP50MsFull: r(full.listP50),
      listP99MsFull: r(full.listP99),
      loadAverage: os.loadavg().map(r),
    })}\n`,
  );
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.stack : String(err));
  process.exitCode = 1;
});
