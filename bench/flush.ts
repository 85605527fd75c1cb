import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import pg from 'pg';
import { createLogger } from '../agent/log/logger';
import { Flusher } from '../agent/telemetry/flusher';
import { migrate } from '../agent/db/migrate';
import { Spool } from '../agent/telemetry/spool';
import type { NewTelemetryEvent } from '../agent/telemetry/telemetrySink';
import { benchNumber, percentile, printTable } from './benchSupport';

// The telemetry benchmark: flush throughput after an outage (1,000,000 spooled events into PostgreSQL,
// events/s and peak RSS during the flush) against one INSERT per event (a sample, extrapolated), and
// the cost of one durable emit (SQLite WAL, synchronous FULL).
// Run: npx tsc -b && node out/bench/flush.js [events] [batchSize]
// PostgreSQL: QUANTILICA_TEST_DATABASE_URL if set, else an embedded cluster with fsync on.

const CHILD = process.argv[2] === '--flush-child';
const EVENTS = CHILD ? 0 : benchNumber('the count of events', process.argv[2], 1_000_000, { min: 1, max: 100_000_000, whole: true });
const BATCH = CHILD ? 0 : benchNumber('the batch size', process.argv[3], 5_000, { min: 1, max: 1_000_000, whole: true });
const NAIVE_SAMPLE = Math.min(10_000, EVENTS);
const EMIT_SAMPLE = 2_000;
const FILL_CHUNK = 10_000;

const SLOTS = 11;
const RUN_EVENTS = 1_000;

/**
 * What an outage leaves: the station's 11 slots busy all along, each running one fetcher after
 * another; a run is a start, heartbeats and a finish (1,000 events), so 1,000,000 events are 1,000 runs.
 */
function eventAt(i: number): NewTelemetryEvent {
  const slot = i % SLOTS;
  const k = Math.floor(i / SLOTS);
  const run = Math.floor(k / RUN_EVENTS) * SLOTS + slot;
  const step = k % RUN_EVENTS;
  const lastStep = Math.min(RUN_EVENTS - 1, Math.floor((EVENTS - 1 - slot) / SLOTS) - Math.floor(k / RUN_EVENTS) * RUN_EVENTS);
  const at = new Date(Date.parse('2025-06-01T00:00:00Z') + i * 10).toISOString();
  const base = { runId: `bench-run-${run}`, task: `fetcher_${run % 40}`, pool: 'heavy-io', at };
  if (step === 0) return { ...base, event: 'start', payload: { slot, argv: ['fetch', '--all'], host: 'bench', pid: 10_000 + run } };
  if (step === lastStep) return { ...base, event: 'finish', payload: { status: 'completed', exitCode: 0, durationSeconds: step * 0.11 } };
  return { ...base, event: 'heartbeat', payload: { n: step } };
}

const mb = (bytes: number) => bytes / 1024 / 1024;

// The shared harness lives in the test project, which this project does not reference (yet): load its
// compiled output at run time, typed here.
type StartTestPostgres = (options?: { durable?: boolean }) => Promise<{ url: string; stop(): Promise<void> }>;
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { startTestPostgres } = require(path.join(__dirname, '..', 'test', 'support', 'postgres.js')) as {
  startTestPostgres: StartTestPostgres;
};

interface ChildFlush {
  seconds: number;
  sent: number;
  error: string | null;
  peakRssMb: number;
  maxRssMb: number;
  startRssMb: number;
}

/**
 * The flush runs in a process of its own, as after an outage (the agent restarting, or `quantilica
 * flush`): its RSS is the flush's, not the benchmark's fill.
 */
async function flushInChild(spoolPath: string, url: string): Promise<ChildFlush> {
  const child = spawn(process.execPath, [__filename, '--flush-child', spoolPath, url, String(BATCH)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    out += chunk;
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  if (code !== 0) throw new Error(`flush child exited with ${code}: ${out}`);
  return JSON.parse(out.trim().split('\n').pop() ?? '{}') as ChildFlush;
}

async function flushChild(spoolPath: string, url: string, batch: number): Promise<void> {
  const logger = createLogger('bench-flush-child', 'warn');
  const startRss = process.memoryUsage().rss;
  let peakRss = startRss;
  const sample = () => {
    peakRss = Math.max(peakRss, process.memoryUsage().rss);
  };
  const sampler = setInterval(sample, 20);
  const spool = new Spool({ path: spoolPath, logger, fallbackPath: `${spoolPath}.fallback` });
  const flusher = new Flusher({ spool, databaseUrl: url, logger, batchSize: batch });
  const started = process.hrtime.bigint();
  const outcome = await flusher.flushNow(sample);
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  clearInterval(sampler);
  sample();
  await flusher.close();
  spool.close();
  process.stderr.write(
    `sampled peak ${mb(peakRss).toFixed(1)} MB, kernel maxRSS ${(process.resourceUsage().maxRSS / 1024).toFixed(1)} MB, heapUsed ${mb(process.memoryUsage().heapUsed).toFixed(1)} MB\n`,
  );
  const result: ChildFlush = {
    seconds,
    sent: outcome.sent,
    error: outcome.error,
    peakRssMb: mb(peakRss),
    maxRssMb: process.resourceUsage().maxRSS / 1024,
    startRssMb: mb(startRss),
  };
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

async function main(): Promise<void> {
  const logger = createLogger('bench-flush', 'warn');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qbench-flush-'));
  const database = await startTestPostgres({ durable: true });
  try {
    const spool = new Spool({ path: path.join(dir, 'spool.db'), fallbackPath: path.join(dir, 'fallback.db'), logger });

    // 1. One durable emit: a transaction with an fsync each.
    const emitMicros: number[] = [];
    for (let i = 0; i < EMIT_SAMPLE; i += 1) {
      const t = process.hrtime.bigint();
      spool.emit(eventAt(i));
      emitMicros.push(Number(process.hrtime.bigint() - t) / 1_000);
    }
    spool.deleteThrough(Number.MAX_SAFE_INTEGER);

    // 2. The outage: EVENTS spooled (in chunks of one transaction each: the fill is not what is measured).
    const fillStart = Date.now();
    for (let i = 0; i < EVENTS; i += FILL_CHUNK) {
      spool.emitMany(Array.from({ length: Math.min(FILL_CHUNK, EVENTS - i) }, (_, k) => eventAt(i + k)));
    }
    const fillSeconds = (Date.now() - fillStart) / 1000;
    const spoolBytes =
      fs.statSync(path.join(dir, 'spool.db')).size + (fs.statSync(path.join(dir, 'spool.db-wal'), { throwIfNoEntry: false })?.size ?? 0);

    // 3. The flush, in a process of its own, with its RSS sampled while it runs.
    spool.close();
    const flushed = await flushInChild(path.join(dir, 'spool.db'), database.url);
    if (flushed.error !== null || flushed.sent !== EVENTS) throw new Error(`flush incomplete: ${JSON.stringify(flushed)}`);
    const flushSeconds = flushed.seconds;
    const peakRss = Math.max(flushed.peakRssMb, flushed.maxRssMb);

    // 4. The baseline: one INSERT per event, each its own transaction, on a sample.
    const client = new pg.Client({ connectionString: database.url, connectionTimeoutMillis: 10_000, query_timeout: 60_000 });
    client.on('error', () => {});
    await client.connect();
    await migrate(client, logger);
    const sample = Array.from({ length: NAIVE_SAMPLE }, (_, i) => eventAt(i));
    const naiveStart = process.hrtime.bigint();
    for (const [i, e] of sample.entries()) {
      await client.query(
        `INSERT INTO core.task_run_log (event_id, run_id, event, at, task, pool, payload, spool_seq)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (event_id) DO NOTHING`,
        [`naive-${i}`, e.runId, e.event, e.at, e.task, e.pool, JSON.stringify(e.payload), i],
      );
    }
    const naiveSeconds = Number(process.hrtime.bigint() - naiveStart) / 1e9;
    await client.end();

    const result = {
      bench: 'telemetry-flush',
      events: EVENTS,
      batchSize: BATCH,
      flushSeconds: round(flushSeconds, 2),
      eventsPerSecond: Math.round(EVENTS / flushSeconds),
      peakRssMb: round(peakRss, 1),
      rssAtFlushStartMb: round(flushed.startRssMb, 1),
      naiveSample: NAIVE_SAMPLE,
      naiveEventsPerSecond: Math.round(NAIVE_SAMPLE / naiveSeconds),
      naiveExtrapolatedSeconds: round((naiveSeconds / NAIVE_SAMPLE) * EVENTS, 0),
      speedup: round(EVENTS / flushSeconds / (NAIVE_SAMPLE / naiveSeconds), 1),
      emitMicrosP50: round(percentile(emitMicros, 50), 0),
      emitMicrosP99: round(percentile(emitMicros, 99), 0),
      fillEventsPerSecond: Math.round(EVENTS / fillSeconds),
      spoolMb: round(mb(spoolBytes), 0),
      targets: { eventsPerSecond: 25_000, peakRssMb: 150 },
      pass: EVENTS / flushSeconds >= 25_000 && peakRss < 150,
    };
    printTable(
      `Telemetry flush: ${EVENTS.toLocaleString('en')} spooled events (${Math.ceil(EVENTS / RUN_EVENTS)} runs, ${SLOTS} at a time) into PostgreSQL (fsync on), batches of ${BATCH}`,
      [
        [
          'batched flush (unnest, ON CONFLICT, one tx/batch)',
          `${result.eventsPerSecond.toLocaleString('en')} ev/s`,
          `${result.flushSeconds} s; target >= 25,000 ev/s`,
        ],
        [
          'peak RSS during the flush',
          `${result.peakRssMb} MB`,
          `flush process: ${result.rssAtFlushStartMb} MB at start, peak incl. kernel maxRSS; target < 150 MB`,
        ],
        [
          `one INSERT per event (autocommit), ${NAIVE_SAMPLE.toLocaleString('en')}-event sample`,
          `${result.naiveEventsPerSecond.toLocaleString('en')} ev/s`,
          `EXTRAPOLATED to ${EVENTS.toLocaleString('en')}: ${result.naiveExtrapolatedSeconds} s (batched is ${result.speedup}x faster)`,
        ],
        [
          'one durable emit (WAL, synchronous FULL)',
          `${result.emitMicrosP50} µs`,
          `p50; p99 ${result.emitMicrosP99} µs; ${EMIT_SAMPLE} emits`,
        ],
        [
          'spool fill (bulk, 10,000 per transaction)',
          `${result.fillEventsPerSecond.toLocaleString('en')} ev/s`,
          `spool file ${result.spoolMb} MB`,
        ],
      ],
    );
    process.stdout.write(`${JSON.stringify(result)}\n`);
  } finally {
    await database.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

function round(value: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

const entry = CHILD ? flushChild(process.argv[3], process.argv[4], Number(process.argv[5])) : main();
entry.catch((err: unknown) => {
  console.error(err instanceof Error ? err.stack : String(err));
  process.exitCode = 1;
});
