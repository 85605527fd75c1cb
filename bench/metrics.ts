import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import * as readline from 'node:readline';
import { POOL_NAMES } from '../shared/protocol';
import type { Logger } from '../agent/log/logger';
import { toRunRow, type StoredRun } from '../agent/runs/runStore';
import { Spool } from '../agent/telemetry/spool';
import { benchNumber, benchStationEnv, cpuTicks, percentile, printTable, startAgent } from './benchSupport';

// The metrics benchmark: `GET /metrics` of the real agent (QUANTILICA_METRICS_LISTEN on the
// loopback) with 100 catalog fetchers, each scheduled under a lateness check (the heaviest gauges), and
// 10,000 ended runs in its history, against a peer: a plain node http server (its own process, on the
// loopback) serving a static body of the same size. Both are asked in turn, one request at a time over
// a kept-alive connection, as Prometheus scrapes, so the machine's load falls on both alike.
// The history is written before the agent starts, through the agent's own spool (Spool.commit of
// RunStore rows, the path RunStore.save takes, without its trim of the table to 5,000 ended runs),
// and QUANTILICA_RETENTION_RUNS keeps all of it: the agent starts with 10,000 ended runs.
// Both processes' CPU time over the measured scrapes (from /proc, whatever else the machine runs) is
// printed per scrape too: on a loaded machine the latencies measure the load, the CPU what a scrape costs.
// Target: p99 under 10 ms.
// Run: npm run bench -- metrics   (or node out/bench/metrics.js [scrapes] [runs])

const SCRAPES = benchNumber('the count of scrapes', process.argv[2], 1000, { min: 1, max: 1_000_000, whole: true });
const HISTORY = benchNumber('the count of ended runs kept', process.argv[3], 10_000, { min: 0, max: 10_000_000, whole: true });
const FETCHERS = 100;
const WARM_UP = Math.min(20, SCRAPES);
const silent: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} };

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address() as net.AddressInfo;
      server.close(() => resolve(address.port));
    });
  });
}

async function station() {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qbench-metrics-'));
  const home = path.join(root, 'home', '.quantilica');
  fs.mkdirSync(home, { recursive: true, mode: 0o700 });
  const catalog = path.join(root, 'catalog.json');
  const fetchers = Array.from({ length: FETCHERS }, (_, i) => ({
    name: `bench-${String(i).padStart(3, '0')}`,
    pool: POOL_NAMES[i % POOL_NAMES.length],
    argv: ['/bin/true'],
    schedule: `${i % 60} ${i % 24} * * *`,
    lateAfterMinutes: 120,
  }));
  fs.writeFileSync(catalog, JSON.stringify({ fetchers }));
  const port = await freePort();
  const env = {
    ...benchStationEnv(root, catalog),
    QUANTILICA_RETENTION_RUNS: String(HISTORY * 2),
    QUANTILICA_METRICS_LISTEN: `127.0.0.1:${port}`,
    CRON_DISK_PAUSE_GB: '0.0001',
    CRON_DISK_WARN_GB: '0.0002',
    CRON_DISK_RESUME_GB: '0.0002',
  };
  return { root, env, port, spoolFile: path.join(home, 'telemetry_spool.db'), fetchers };
}

/** HISTORY ended runs over the last 10 days, round robin over the fetchers; one in ten failed, some retried. */
async function writeHistory(spoolFile: string, fetchers: Array<{ name: string; pool: string }>): Promise<void> {
  const spool = new Spool({ path: spoolFile, logger: silent });
  try {
    const now = Date.now();
    const span = 10 * 86400_000;
    let batch = [];
    for (let i = 0; i < HISTORY; i++) {
      const f = fetchers[i % fetchers.length];
      const enqueued = now - span + Math.floor((i * span) / HISTORY);
      const started = enqueued + 50;
      const finished = started + 1000 + (i % 600) * 1000;
      const failed = i % 10 === 9;
      const run: StoredRun = {
        runId: `${enqueued.toString(36)}-${i.toString(16).padStart(8, '0')}`,
        fetcher: f.name,
        pool: f.pool,
        status: failed ? 'failed' : 'completed',
        trigger: 'schedule',
        args: [],
        enqueuedAt: new Date(enqueued).toISOString(),
        startedAt: new Date(started).toISOString(),
        finishedAt: new Date(finished).toISOString(),
        slot: 0,
        pid: 100_000 + i,
        exitCode: failed ? 1 : 0,
        signal: null,
        reason: failed ? 'exit-code' : null,
        wait: null,
        logPath: null,
        attempt: i % 50 === 0 ? 2 : 1,
        attempts: 1,
        startTime: null,
        statusFile: null,
        ownerPid: process.pid,
        ownerStartTime: 0,
        ownerRole: 'agent',
        waitSince: null,
      };
      batch.push(toRunRow(run));
      if (batch.length === 500) {
        await spool.commit(batch, []);
        batch = [];
      }
    }
    if (batch.length > 0) await spool.commit(batch, []);
  } finally {
    spool.close();
  }
}

/** A plain node http server in its own process serving `size` bytes at /metrics; resolves with its port. */
async function startPeer(size: number): Promise<{ child: ChildProcess; port: number }> {
  const script = `const http = require('node:http');
const body = Buffer.alloc(${size}, 'a');
const server = http.createServer((req, res) => { res.writeHead(200, { 'Content-Type': 'text/plain; version=0.0.4; charset=utf-8' }).end(body); });
server.listen(0, '127.0.0.1', () => process.stdout.write(server.address().port + '\\n'));`;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the peer exited with ${code}`)));
    readline.createInterface({ input: child.stdout }).once('line', (line) => resolve(Number(line)));
  });
  return { child, port };
}

/** One GET over the kept-alive connection: milliseconds to the last byte, and the body. */
function get(agent: http.Agent, port: number): Promise<{ ms: number; body: string }> {
  return new Promise((resolve, reject) => {
    const sent = process.hrtime.bigint();
    const req = http.get({ host: '127.0.0.1', port, path: '/metrics', agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        if (res.statusCode !== 200) reject(new Error(`GET /metrics on ${port} answered ${res.statusCode}`));
        else resolve({ ms: Number(process.hrtime.bigint() - sent) / 1e6, body: Buffer.concat(chunks).toString('utf8') });
      });
    });
    req.once('error', reject);
  });
}

/** The sum of a counter's samples in a text exposition. */
function sumOf(text: string, name: string): number {
  let sum = 0;
  for (const line of text.split('\n'))
    if (line.startsWith(`${name}{`) || line.startsWith(`${name} `)) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  return sum;
}

async function main(): Promise<void> {
  const { root, env, port, spoolFile, fetchers } = await station();
  const filledAt = process.hrtime.bigint();
  await writeHistory(spoolFile, fetchers);
  const fillSeconds = Number(process.hrtime.bigint() - filledAt) / 1e9;
  const agent = await startAgent(env);
  const keepAlive = new http.Agent({ keepAlive: true, maxSockets: 1 });
  let peer: { child: ChildProcess; port: number } | null = null;
  try {
    const first = await get(keepAlive, port);
    const finishedTotal = sumOf(first.body, 'quantilica_runs_finished_total');
    if (finishedTotal < HISTORY)
      throw new Error(`quantilica_runs_finished_total is ${finishedTotal}, not the ${HISTORY} runs of the history`);
    const size = Buffer.byteLength(first.body);
    peer = await startPeer(size);
    const agentMs: number[] = [];
    const peerMs: number[] = [];
    for (let i = 0; i < WARM_UP; i++) {
      await get(keepAlive, port);
      await get(keepAlive, peer.port);
    }
    const ticksBefore = { agent: cpuTicks(agent.pid!), peer: cpuTicks(peer.child.pid!) };
    for (let i = 0; i < SCRAPES; i++) {
      agentMs.push((await get(keepAlive, port)).ms);
      peerMs.push((await get(keepAlive, peer.port)).ms);
    }
    // A tick is 10 ms of CPU: per scrape, ms.
    const cpuMs = {
      agent: ((cpuTicks(agent.pid!) - ticksBefore.agent) * 10) / SCRAPES,
      peer: ((cpuTicks(peer.child.pid!) - ticksBefore.peer) * 10) / SCRAPES,
    };
    const r = (n: number) => Math.round(n * 100) / 100;
    const result = {
      scrapes: SCRAPES,
      fetchers: FETCHERS,
      historyRuns: HISTORY,
      runsFinishedTotal: finishedTotal,
      bodyBytes: size,
      historyWriteSeconds: r(fillSeconds),
      agentP50Ms: r(percentile(agentMs, 50)),
      agentP99Ms: r(percentile(agentMs, 99)),
      agentMaxMs: r(Math.max(...agentMs)),
      peerP50Ms: r(percentile(peerMs, 50)),
      peerP99Ms: r(percentile(peerMs, 99)),
      peerMaxMs: r(Math.max(...peerMs)),
      agentCpuMsPerScrape: r(cpuMs.agent),
      peerCpuMsPerScrape: r(cpuMs.peer),
      loadAverage: os.loadavg().map(r),
    };
    printTable(
      `metrics: GET /metrics × ${SCRAPES}, ${FETCHERS} scheduled fetchers, ${HISTORY} ended runs in the history (${size} bytes a scrape), load average ${result.loadAverage.join(' ')}`,
      [
        ['agent /metrics p50', `${result.agentP50Ms} ms`, ''],
        ['agent /metrics p99', `${result.agentP99Ms} ms`, 'target < 10 ms'],
        ['agent /metrics max', `${result.agentMaxMs} ms`, ''],
        ['peer: node http, same-size static body, p50', `${result.peerP50Ms} ms`, ''],
        ['peer: node http, same-size static body, p99', `${result.peerP99Ms} ms`, ''],
        ['peer max', `${result.peerMaxMs} ms`, ''],
        ['CPU per scrape: agent / peer', `${result.agentCpuMsPerScrape} / ${result.peerCpuMsPerScrape} ms`, 'user + system, all threads'],
        [
          'quantilica_runs_finished_total (sum)',
          `${finishedTotal}`,
          `seeded from the history (written in ${result.historyWriteSeconds} s)`,
        ],
      ],
    );
    process.stdout.write(`${JSON.stringify({ bench: 'metrics', ...result })}\n`);
  } finally {
    keepAlive.destroy();
    peer?.child.kill('SIGTERM');
    const exited = new Promise((resolve) => agent.once('exit', resolve));
    agent.kill('SIGTERM');
    await exited;
    fs.rmSync(root, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
});
