import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { flockSync } from 'fs-ext';
import pg from 'pg';
import { createLogger } from '../agent/log/logger';
import { distFile } from '../agent/paths';
import { PgSlotBackend } from '../agent/slots/pgSlotBackend';
import { PgSlotPool } from '../agent/slots/pgSlotPool';
import type { PoolBackend, PoolGrant } from '../agent/slots/poolBackend';
import { SlotPool } from '../agent/slots/slotPool';
import { privatePolicy } from '../agent/station/stationPolicy';
import { startTestPostgres } from '../test/support/postgres';
import { removeAtExit } from '../test/support/removeAtExit';
import { benchNumber, percentile, printTable } from './benchSupport';

// The postgres slot backend's benchmark: slot acquire and release latency, file backend (flock) against postgres
// backend (advisory lock held by a lock keeper process), one slot at a time on a free 3-slot pool.
// acquire: from `acquire()` to the held slot; release: from closing the agent's copy (the run's end)
// until the slot is free for anyone (file: a flock try succeeds; postgres: pg_locks no longer lists it).
// Run: npm run build && npx tsc -b && node out/bench/pgSlots.js [rounds]

const ROUNDS = benchNumber('the count of rounds', process.argv[2], 200, { min: 1, max: 100_000, whole: true });
const GAP_MS = benchNumber('BENCH_GAP_MS', process.env.BENCH_GAP_MS, 0, { min: 0, max: 60_000 });

async function measure(
  pool: PoolBackend,
  isFree: (slot: PoolGrant) => Promise<boolean>,
): Promise<{ acquire: number[]; release: number[] }> {
  const acquire: number[] = [];
  const release: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    const t0 = process.hrtime.bigint();
    const slot = await pool.acquire(`bench-${i}`, new AbortController().signal);
    const t1 = process.hrtime.bigint();
    slot.lock.closeOwnCopy();
    pool.released(slot.index);
    while (!(await isFree(slot))) await new Promise((r) => setImmediate(r));
    const t2 = process.hrtime.bigint();
    // A pause between rounds (BENCH_GAP_MS), as between real runs: the postgres pool's spare keeper is warm then.
    if (GAP_MS > 0) await new Promise((r) => setTimeout(r, GAP_MS));
    acquire.push(Number(t1 - t0) / 1e6);
    release.push(Number(t2 - t1) / 1e6);
  }
  return { acquire, release };
}

async function main(): Promise<void> {
  const logger = createLogger('bench', 'warn');
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qbench-pgslots-'));
  const filePool = new SlotPool({
    name: 'heavy-io',
    dir: path.join(root, 'heavy-io'),
    size: 3,
    waitTimeoutSeconds: 60,
    policy: privatePolicy(),
    isRecordedRun: () => false,
    logger,
    onReclaim: () => {},
  });
  const file = await measure(filePool, (slot) => {
    const probe = fs.openSync(path.join(root, 'heavy-io', `slot_${slot.index}.lock`), 'r');
    try {
      flockSync(probe, 'exnb');
      return Promise.resolve(true);
    } catch {
      return Promise.resolve(false);
    } finally {
      fs.closeSync(probe);
    }
  });
  filePool.close();

  const db = await startTestPostgres({ durable: true });
  const backend = new PgSlotBackend({
    url: db.url,
    station: 'bench',
    defaults: new Map([
      ['heavy-io', 3],
      ['held-11', 11],
    ]),
    logger,
    keeperPath: distFile('pgSlotKeeper.js'),
    keeperDir: path.join(root, 'pg-keeper'),
  });
  const observer = new pg.Client({ connectionString: db.url });
  try {
    await backend.open();
    await observer.connect();
    const pgPool = new PgSlotPool({
      name: 'heavy-io',
      defaultSize: 3,
      waitTimeoutSeconds: 60,
      backend,
      logger,
    });
    const pgRes = await measure(
      pgPool,
      async (slot) =>
        (
          await observer.query(
            `SELECT 1 FROM pg_locks l JOIN core.pool p ON l.classid = p.lock_key::oid
      WHERE p.name = 'heavy-io' AND l.locktype = 'advisory' AND l.objsubid = 2 AND l.objid = $1::integer::oid`,
            [slot.index],
          )
        ).rowCount === 0,
    );
    pgPool.close();
    const rss = await keeperRssWith11Held(backend, logger);
    const row = (name: string, v: number[]): [string, string, string] => [
      name,
      `p50 ${percentile(v, 50).toFixed(2)} ms`,
      `p99 ${percentile(v, 99).toFixed(2)} ms`,
    ];
    printTable(
      `slot latency, ${ROUNDS} rounds, one at a time, free 3-slot pool (${os.cpus().length} cores, load ${os.loadavg()[0].toFixed(1)})`,
      [
        row('file acquire', file.acquire),
        row('file release', file.release),
        row('postgres acquire', pgRes.acquire),
        row('postgres release', pgRes.release),
        ['keeper RSS, 11 held slots', `${rss.processes} process(es)`, `${rss.mb.toFixed(1)} MB`],
      ],
    );
    process.stdout.write(
      `${JSON.stringify({ bench: 'pgSlots', rounds: ROUNDS, load: os.loadavg()[0], file: summary(file), postgres: summary(pgRes), keeperRss11Mb: rss.mb, keeperProcesses: rss.processes })}\n`,
    );
  } finally {
    await observer.end().catch(() => {});
    await backend.close();
    await db.stop();
    removeAtExit(root);
  }
}

/** Holds 11 slots at once and sums the RSS of every keeper process of the bench's station. */
async function keeperRssWith11Held(
  backend: PgSlotBackend,
  logger: ReturnType<typeof createLogger>,
): Promise<{ mb: number; processes: number }> {
  const pool = new PgSlotPool({ name: 'held-11', defaultSize: 11, waitTimeoutSeconds: 60, backend, logger });
  const grants = await Promise.all(Array.from({ length: 11 }, (_, i) => pool.acquire(`held-${i}`, new AbortController().signal)));
  let kb = 0;
  let processes = 0;
  for (const p of fs.readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    try {
      const cmd = fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0');
      if (!cmd.some((a) => a.endsWith('pgSlotKeeper.js')) || !cmd.includes('bench')) continue;
      const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${p}/status`, 'utf8'));
      if (m) {
        kb += Number(m[1]);
        processes += 1;
      }
    } catch {
      /* gone meanwhile */
    }
  }
  for (const g of grants) g.lock.closeOwnCopy();
  pool.close();
  return { mb: kb / 1024, processes };
}

function summary(r: { acquire: number[]; release: number[] }) {
  return {
    acquireP50: percentile(r.acquire, 50),
    acquireP99: percentile(r.acquire, 99),
    releaseP50: percentile(r.release, 50),
    releaseP99: percentile(r.release, 99),
  };
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
