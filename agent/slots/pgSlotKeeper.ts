import * as fs from 'node:fs';
import * as net from 'node:net';
import * as readline from 'node:readline';
import pg from 'pg';
import { KeeperExit } from '../helperExitCodes';
import { poolLocks, readPool, slotNumbers } from './pgSlotSql';

// The lock keeper of one slot of the postgres backend (bundled as dist/pgSlotKeeper.js).
//
// Why a process of its own: a PostgreSQL session cannot be handed to a fetcher the way a flock'd
// descriptor can, and a lock held by the agent's connection would die with the agent (kill -9) while
// its fetchers still run. So each held slot has this small keeper, started detached (its own session,
// so a signal to the agent's group does not reach it) with:
//   argv   POOL STATION            no environment: the slot database's URL (a secret) comes as the
//          first line on fd 0, never on the command line or in /proc/PID/environ
//   fd 0   lines from the agent: {"url":URL} first, then {"take":RUN_ID} once (the agent may start a keeper ahead of need, so
//          its start-up and connection are not on a waiting run's path), then
//          {"record":{pid,fetcher,runId,since}} once the fetcher is spawned
//   fd 1   lines to the agent: {"acquired":N} | {"busy":true} | {"error":"…"} | {"lost":"…"}
//   fd 3   the lifeline: the other end is handed to the fetcher as its fd 3 (where the file backend
//          puts the flock'd descriptor). Every process of the run inherits it; when the last one is
//          gone the keeper reads end-of-file, ends its session, and the lock is free. The agent's
//          death changes nothing: the keeper lives exactly as long as the run's processes.
// If the session is lost while the run holds the slot (pg_terminate_backend, a server restart, a
// network cut long enough for the server to drop it), PostgreSQL has freed the lock and another
// station may take it: the keeper SIGKILLs the run's process group at once, so no slot is ever
// counted free while its fetcher lives (beyond the moment it takes the keeper to notice).

const [pool, station] = process.argv.slice(2);
let runId = '';

let group: number | null = null;
let lost = false;
let ending = false;

function say(message: Record<string, unknown>): void {
  // The agent may be gone: its end of the pipe then fails with EPIPE, which changes nothing here.
  try {
    process.stdout.write(`${JSON.stringify(message)}\n`);
  } catch {
    /* the agent is gone */
  }
}
process.stdout.on('error', () => {});
process.stdin.on('error', () => {});

function killRun(): void {
  if (group === null) return;
  try {
    process.kill(-group, 'SIGKILL');
  } catch {
    /* already gone */
  }
}

async function main(): Promise<void> {
  if (!pool || !station) {
    say({ error: 'usage: pgSlotKeeper POOL STATION, with {"url":URL} as the first line on stdin' });
    process.exit(KeeperExit.usage);
  }
  const lifeline = new net.Socket({ fd: 3, readable: true, writable: false });
  // The session, once open: a record line arriving later goes to it.
  const current: { client?: pg.Client } = {};
  let urlFor: (url: string) => void = () => {};
  const gotUrl = new Promise<string>((resolve) => {
    urlFor = resolve;
  });
  let url = '';
  const lines = readline.createInterface({ input: process.stdin });
  // The agent writes the URL at once; a stdin that ends first leaves nothing to connect to.
  lines.once('close', () => {
    if (url === '') {
      say({ error: 'stdin ended before the slot database URL' });
      process.exit(KeeperExit.usage);
    }
  });
  let takeFor: (id: string) => void = () => {};
  const taken = new Promise<string>((resolve) => {
    takeFor = resolve;
  });
  lines.on('line', (line) => {
    let record: { pid?: unknown; fetcher?: unknown; runId?: unknown; since?: unknown } | undefined;
    let take: unknown;
    let given: unknown;
    try {
      ({ record, take, url: given } = JSON.parse(line) as { record?: typeof record; take?: unknown; url?: unknown });
    } catch {
      return;
    }
    if (typeof given === 'string' && given !== '' && url === '') {
      url = given;
      urlFor(given);
      return;
    }
    if (typeof take === 'string' && take !== '' && runId === '') {
      runId = take;
      takeFor(take);
      return;
    }
    if (!record) return;
    // The run's process group (the wrapper's pid); none for in-agent work, which the keeper never kills.
    const pid = typeof record.pid === 'number' && Number.isInteger(record.pid) && record.pid > 1 ? record.pid : null;
    group = pid;
    if (lost) {
      killRun();
      return;
    }
    current.client
      ?.query(
        'UPDATE core.slot_holder SET pid = $3, fetcher = $4, since = coalesce($5::timestamptz, since) WHERE pool = $1 AND slot = $2 AND backend_pid = pg_catalog.pg_backend_pid()',
        [
          pool,
          slotTaken,
          pid,
          typeof record.fetcher === 'string' ? record.fetcher : null,
          typeof record.since === 'string' ? record.since : null,
        ],
      )
      ?.catch(() => {});
  });

  // Every line is heard from the start (the URL and the take may come in one chunk); the session opens once the URL is here.
  const session = new pg.Client({
    connectionString: await gotUrl,
    application_name: `quantilica-slot ${station} ${pool}`,
    keepAlive: true,
    connectionTimeoutMillis: 10_000,
  });
  current.client = session;
  const onLost = (why: string) => {
    if (lost || ending) return;
    lost = true;
    killRun();
    say({ lost: why });
  };
  session.on('error', (err) => onLost((err as { code?: string }).code ?? 'connection-error'));
  session.on('end', () => onLost('connection-ended'));
  const finish = async (code: number) => {
    if (ending) return;
    ending = true;
    await session.end().catch(() => {});
    process.exit(code);
  };
  lifeline.on('data', () => {});
  lifeline.on('error', () => {
    void finish(0);
  });
  lifeline.on('close', () => {
    void finish(0);
  });
  await session.connect();
  await session.query('SET search_path = pg_catalog, pg_temp');
  await taken;
  const slot = await take(session);
  if (slot === null) {
    say({ busy: true });
    await finish(0);
    return;
  }
  slotTaken = slot;
  say({ acquired: slot });
}

let slotTaken = -1;

/**
 * Takes a free slot of the pool, unless the pool is full counting holders beyond a shrunk size. The
 * slot numbers are the pool's first free numbers that no other role blocks (slotNumbers).
 */
async function take(client: pg.Client): Promise<number | null> {
  const { slots, lockKey } = await readPool(client, pool);
  const { held, blocked } = await poolLocks(client, lockKey);
  if (held.length >= slots) return null;
  const mine = new Set(held);
  for (const index of slotNumbers(slots, blocked)) {
    if (mine.has(index)) continue;
    const got =
      (await client.query<{ ok: boolean }>('SELECT pg_catalog.pg_try_advisory_lock($1, $2) AS ok', [lockKey, index])).rows[0]?.ok === true;
    if (!got) continue;
    // Under the lock: count again (another station may have taken a slot meanwhile, or the pool shrunk).
    const now = await readPool(client, pool);
    // The count decides; a number beyond a shrunk size is only shown as such.
    if ((await poolLocks(client, lockKey)).held.length > now.slots) {
      await client.query('SELECT pg_catalog.pg_advisory_unlock($1, $2)', [lockKey, index]);
      return null;
    }
    await client.query(
      `INSERT INTO core.slot_holder (pool, slot, station, keeper_pid, run_id, backend_pid) VALUES ($1, $2, $3, $4, $5, pg_catalog.pg_backend_pid())
      ON CONFLICT (pool, slot) DO UPDATE SET station = EXCLUDED.station, keeper_pid = EXCLUDED.keeper_pid, pid = NULL, run_id = EXCLUDED.run_id,
        fetcher = NULL, since = now(), backend_pid = EXCLUDED.backend_pid`,
      [pool, index, station, process.pid, runId],
    );
    return index;
  }
  return null;
}

main().catch((err: unknown) => {
  // The code (a SQLSTATE or an errno) tells the agent whether to wait (connection cap, outage) or fail the run.
  say({ error: (err as Error).message, code: (err as { code?: unknown }).code });
  // Closing fd 3 ourselves is not needed: exiting ends the session and with it any lock.
  try {
    fs.closeSync(3);
  } catch {
    /* already closed */
  }
  process.exit(KeeperExit.failed);
});
