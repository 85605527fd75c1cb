import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import * as readline from 'node:readline';
import pg from 'pg';
import { KeeperExit } from '../helperExitCodes';

// The lock keeper of a station for the postgres backend (bundled as dist/pgSlotKeeper.js): one
// process holds every slot the station's runs hold, each slot on a PostgreSQL session of its own
// (a session advisory lock belongs to its connection, so a connection per held slot).
//
// Why a process apart from the agent: a PostgreSQL session cannot be handed to a fetcher the way a
// flock'd descriptor can, and a lock held by the agent's connection would die with the agent (kill -9)
// while its fetchers still run. The keeper is started detached (its own session, so a signal to the
// agent's group does not reach it) with:
//   argv   STATION DIR             no environment: the slot database's URL (a secret) and the token that
//          the agent's takes must show come as the first line on fd 0, never on the command line or in
//          /proc/PID/environ
//   fd 0   lines from the agent: {"url":URL,"token":T} first, then {"record":{id,pid,fetcher,runId,since}}
//          once a slot's fetcher is spawned; its end means the agent is gone
//   fd 1   lines to the agent: {"ready":SOCKET} | {"error":"…"} | {"lost":"…","id":ID} | {"released":ID}
//   DIR/keeper-PID.sock   a socket only this account can reach (DIR 0700, checked on its descriptor;
//          the socket 0600). Each take is a connection of its own: the agent writes
//          {"token":T,"id":ID,"pool":P,"take":RUN_ID}, the keeper answers {"acquired":N} | {"busy":true} |
//          {"error":"…","code":…}. After acquired the connection is the slot's lifeline: the agent hands
//          its end to the fetcher as fd 3 (where the file backend puts the flock'd descriptor) and closes
//          its own copy. Every process of the run inherits it; when the last one is gone the keeper reads
//          end-of-file and ends that slot's session, and the lock is free.
// The agent's death changes nothing for held slots. A keeper whose agent is gone takes no new slot;
// it exits once its last slot is released (a new agent starts a keeper of its own).
// If a slot's session is lost while its run holds it (pg_terminate_backend, a server restart, a
// network cut long enough for the server to drop it), PostgreSQL has freed the lock and another
// station may take it: the keeper SIGKILLs that run's process group at once, so no slot is ever
// counted free while its fetcher lives (beyond the moment it takes the keeper to notice).

/** Ready connections kept for the next take, so a waiting run does not wait for a connection. */
const SPARES = 1;
/** How long a spare connection waits for a take before it is closed. */
const SPARE_IDLE_MS = 30_000;
/** A take line longer than this is not the agent's. */
const TAKE_LINE_CAP = 4096;

const [station, dir] = process.argv.slice(2);

interface Held {
  client: pg.Client;
  pool: string;
  slot: number;
  group: number | null;
  lost: boolean;
  ending: boolean;
}

let url = '';
let token = '';
let agentGone = false;
let socketPath = '';
let server: net.Server | null = null;
let taking = 0;
const held = new Map<string, Held>();
const spares: pg.Client[] = [];
let opening = 0;
let spareTimer: NodeJS.Timeout | null = null;

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

function killGroup(group: number | null): void {
  if (group === null) return;
  try {
    process.kill(-group, 'SIGKILL');
  } catch {
    /* already gone */
  }
}

function exitNow(code: number): never {
  if (socketPath !== '') {
    try {
      fs.unlinkSync(socketPath);
    } catch {
      /* already gone */
    }
  }
  process.exit(code);
}

/** Nothing held, nothing being taken, nobody to take for: the keeper's work is done. */
function maybeExit(): void {
  if (!agentGone || held.size > 0 || taking > 0) return;
  for (const c of spares.splice(0)) void c.end().catch(() => {});
  exitNow(0);
}

async function openSession(): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString: url,
    application_name: `quantilica-slot ${station}`,
    keepAlive: true,
    connectionTimeoutMillis: 10_000,
  });
  // Until it holds a slot, an error only ends the connection (a spare is dropped, a take fails).
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('SET search_path = pg_catalog, pg_temp');
  } catch (err) {
    await client.end().catch(() => {});
    throw err;
  }
  return client;
}

/** Keeps SPARES ready connections while the agent lives; a spare that breaks is dropped. */
function refill(): void {
  if (agentGone || url === '') return;
  while (spares.length + opening < SPARES) {
    opening += 1;
    openSession()
      .then(warmUp)
      .then(addSpare)
      .catch(() => {
        /* the next take connects by itself and says why it cannot */
      })
      .finally(() => {
        opening -= 1;
      });
  }
  if (spareTimer) clearTimeout(spareTimer);
  // Spares are for bursts of runs: after a while without takes they go (a connection each).
  spareTimer = setTimeout(() => {
    for (const c of spares.splice(0)) void c.end().catch(() => {});
  }, SPARE_IDLE_MS);
  spareTimer.unref();
}

/**
 * A new backend's first look at pg_locks and pg_stat_activity costs it most of a take (its catalog
 * caches are cold: about 18 ms against 4 ms warm, at load 3.5); a spare pays that before a take needs it.
 */
const WARM_UP = `SELECT (SELECT count(*) FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory'),
  (SELECT count(*) FROM core.pool), (SELECT count(*) FROM core.slot_holder)`;

async function warmUp(client: pg.Client): Promise<pg.Client> {
  try {
    await client.query(WARM_UP);
  } catch (err) {
    await client.end().catch(() => {});
    throw err;
  }
  return client;
}

/** A ready session joins the spares; one that breaks while it waits is dropped. */
function addSpare(client: pg.Client): void {
  if (agentGone || spares.length >= SPARES) {
    void client.end().catch(() => {});
    return;
  }
  const drop = () => {
    const at = spares.indexOf(client);
    if (at >= 0) spares.splice(at, 1);
  };
  client.once('end', drop);
  client.on('error', drop);
  spares.push(client);
}

/**
 * What makes a slot's session hold nothing again: its holder row gone and every advisory lock of the
 * session released (all of them, so a reused session can never carry a slot it was not given).
 */
const FREE_SESSION = `WITH gone AS (DELETE FROM core.slot_holder WHERE pool = $1 AND slot = $2 AND backend_pid = pg_catalog.pg_backend_pid())
  SELECT pg_catalog.pg_advisory_unlock_all()`;

/** A spare if one is ready (whether it is, the take says), else a new session. */
function session(): { client: Promise<pg.Client>; spare: boolean } {
  const spare = spares.shift();
  if (!spare) return { client: openSession(), spare: false };
  spare.removeAllListeners('end');
  spare.removeAllListeners('error');
  spare.on('error', () => {});
  return { client: Promise.resolve(spare), spare: true };
}

/**
 * Takes a free slot of the pool, unless the pool is full counting holders beyond a shrunk size, in one
 * round trip (core.take_slot): the slot numbers are the pool's first numbers that no other role's lock
 * blocks, and the count under the lock decides.
 */
async function take(client: pg.Client, pool: string, runId: string): Promise<number | null> {
  const { rows } = await client.query<{ slot: number | null }>('SELECT core.take_slot($1, $2, $3, $4) AS slot', [
    pool,
    station,
    process.pid,
    runId,
  ]);
  return rows[0]?.slot ?? null;
}

/** The slot's lifeline ended (its fetcher's last process is gone), or its session did: the slot is free. */
function release(id: string, slot: Held): void {
  if (slot.ending) return;
  slot.ending = true;
  held.delete(id);
  const { client } = slot;
  client.removeAllListeners('error');
  client.removeAllListeners('end');
  client.on('error', () => {});
  const end = () => client.end().catch(() => {});
  // Back to back takes are the burst case: the session that held the slot, once it holds nothing,
  // is the next take's spare, so that take opens no connection (most of an acquire's time). A session
  // whose slot was lost, or that cannot be freed, ends: its locks end with it.
  const freed =
    !slot.lost && !agentGone && spares.length < SPARES
      ? client.query(FREE_SESSION, [slot.pool, slot.slot]).then(
          () => addSpare(client),
          () => end(),
        )
      : end();
  void freed.finally(() => {
    say({ released: id });
    maybeExit();
  });
}

/** One take, on its own connection to the keeper's socket; the connection is the slot's lifeline after. */
function serve(sock: net.Socket): void {
  let buffered = '';
  let started = false;
  sock.on('error', () => {});
  const answer = (message: Record<string, unknown>) => {
    if (!sock.destroyed) sock.write(`${JSON.stringify(message)}\n`);
  };
  sock.on('data', (chunk: Buffer) => {
    if (started) return; // after the take line, what a fetcher writes on its fd 3 means nothing
    buffered += chunk.toString('utf8');
    const nl = buffered.indexOf('\n');
    if (nl < 0) {
      if (buffered.length > TAKE_LINE_CAP) sock.destroy();
      return;
    }
    started = true;
    let msg: { token?: unknown; id?: unknown; pool?: unknown; take?: unknown };
    try {
      msg = JSON.parse(buffered.slice(0, nl)) as typeof msg;
    } catch {
      sock.destroy();
      return;
    }
    const { id, pool, take: runId } = msg;
    if (msg.token !== token || typeof id !== 'string' || typeof pool !== 'string' || typeof runId !== 'string' || held.has(id)) {
      sock.destroy();
      return;
    }
    if (agentGone) {
      answer({ error: 'the agent that started this keeper is gone' });
      sock.destroy();
      return;
    }
    taking += 1;
    void takeFor(sock, id, pool, runId, answer).finally(() => {
      taking -= 1;
      maybeExit();
    });
  });
}

async function takeFor(sock: net.Socket, id: string, pool: string, runId: string, answer: (m: Record<string, unknown>) => void) {
  let client: pg.Client;
  let spare: boolean;
  try {
    const got = session();
    spare = got.spare;
    client = await got.client;
  } catch (err) {
    // The code (a SQLSTATE or an errno) tells the agent whether to wait (connection cap, outage) or fail the run.
    answer({ error: (err as Error).message, code: (err as { code?: unknown }).code });
    sock.destroy();
    return;
  } finally {
    refill();
  }
  let slot: number | null;
  try {
    slot = await take(client, pool, runId);
  } catch (err) {
    await client.end().catch(() => {});
    // A spare the server dropped while it idled fails only on use: the take gets a fresh session.
    if (spare && !sock.destroyed) return takeFor(sock, id, pool, runId, answer);
    answer({ error: (err as Error).message, code: (err as { code?: unknown }).code });
    sock.destroy();
    return;
  }
  if (slot === null) {
    // No lock was taken on it: the session is as good as a spare.
    if (agentGone || spares.length >= SPARES) void client.end().catch(() => {});
    else spares.push(client);
    answer({ busy: true });
    sock.destroy();
    return;
  }
  const h: Held = { client, pool, slot, group: null, lost: false, ending: false };
  held.set(id, h);
  const onLost = (why: string) => {
    if (h.lost || h.ending) return;
    h.lost = true;
    killGroup(h.group);
    say({ lost: why, id });
  };
  client.removeAllListeners('error');
  client.on('error', (err) => onLost((err as { code?: string }).code ?? 'connection-error'));
  client.on('end', () => onLost('connection-ended'));
  sock.on('close', () => release(id, h));
  // The agent gave up meanwhile (a cancel, its timeout): the lifeline is already closed.
  if (sock.destroyed) {
    release(id, h);
    return;
  }
  answer({ acquired: slot });
}

function onRecord(line: string): void {
  let record: { id?: unknown; pid?: unknown; fetcher?: unknown; runId?: unknown; since?: unknown } | undefined;
  let given: unknown;
  let givenToken: unknown;
  try {
    ({ record, url: given, token: givenToken } = JSON.parse(line) as { record?: typeof record; url?: unknown; token?: unknown });
  } catch {
    return;
  }
  if (typeof given === 'string' && given !== '' && url === '' && typeof givenToken === 'string' && givenToken.length >= 32) {
    url = given;
    token = givenToken;
    listen().catch((err: unknown) => {
      say({ error: (err as Error).message, code: (err as { code?: unknown }).code });
      exitNow(KeeperExit.failed);
    });
    return;
  }
  if (!record || typeof record.id !== 'string') return;
  const h = held.get(record.id);
  if (!h) return;
  // The run's process group (the wrapper's pid); none for in-agent work, which the keeper never kills.
  const pid = typeof record.pid === 'number' && Number.isInteger(record.pid) && record.pid > 1 ? record.pid : null;
  h.group = pid;
  if (h.lost) {
    killGroup(pid);
    return;
  }
  h.client
    .query(
      'UPDATE core.slot_holder SET pid = $3, fetcher = $4, since = coalesce($5::timestamptz, since) WHERE pool = $1 AND slot = $2 AND backend_pid = pg_catalog.pg_backend_pid()',
      [
        h.pool,
        h.slot,
        pid,
        typeof record.fetcher === 'string' ? record.fetcher : null,
        typeof record.since === 'string' ? record.since : null,
      ],
    )
    .catch(() => {});
}

/**
 * The folder of the keepers' sockets: made 0700 if missing, then opened without following a link and
 * checked on its descriptor (a real folder, ours, nobody else's way in). The socket is bound through
 * that descriptor (/proc/self/fd/N), so a folder swapped after the check is not used.
 */
function privateDir(): number {
  try {
    fs.mkdirSync(dir, { mode: 0o700 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  const fd = fs.openSync(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW);
  const st = fs.fstatSync(fd);
  if (!st.isDirectory() || st.uid !== process.getuid!() || (st.mode & 0o077) !== 0) {
    fs.closeSync(fd);
    throw new Error(
      `${dir} must be a folder of uid ${process.getuid!()} that only its owner can enter (mode 700), not mode ${(st.mode & 0o7777).toString(8)} uid ${st.uid}`,
    );
  }
  return fd;
}

async function listen(): Promise<void> {
  const dirFd = privateDir();
  const name = `keeper-${process.pid}.sock`;
  const via = `/proc/self/fd/${dirFd}/${name}`;
  // A socket left by a killed keeper of the same pid.
  fs.rmSync(via, { force: true });
  process.umask(0o077);
  const srv = net.createServer({ pauseOnConnect: false }, serve);
  await new Promise<void>((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(via, () => resolve());
  });
  fs.chmodSync(via, 0o600);
  const st = fs.lstatSync(via);
  if (!st.isSocket() || st.uid !== process.getuid!() || (st.mode & 0o077) !== 0) throw new Error(`${via} is not a private socket`);
  server = srv;
  socketPath = path.join(dir, name);
  say({ ready: socketPath });
  refill();
}

function main(): void {
  if (!station || !dir || !path.isAbsolute(dir)) {
    say({ error: 'usage: pgSlotKeeper STATION DIR, with {"url":URL,"token":T} as the first line on stdin' });
    exitNow(KeeperExit.usage);
  }
  const lines = readline.createInterface({ input: process.stdin });
  lines.on('line', onRecord);
  lines.once('close', () => {
    // The agent is gone (or stopping): no new takes; held slots stay until their fetchers end.
    if (url === '') {
      say({ error: 'stdin ended before the slot database URL' });
      exitNow(KeeperExit.usage);
    }
    agentGone = true;
    server?.close();
    if (spareTimer) clearTimeout(spareTimer);
    for (const c of spares.splice(0)) void c.end().catch(() => {});
    maybeExit();
  });
}

process.on('uncaughtException', (err) => {
  say({ error: err.message, code: (err as { code?: unknown }).code });
  // Exiting ends every session and with it every lock this keeper holds.
  exitNow(KeeperExit.failed);
});
main();
