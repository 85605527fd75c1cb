import type pg from 'pg';
import { loadPg } from '../db/loadPg';
import { ConfigError } from '../config/configError';
import { redactCredentials } from '../config/redact';
import type { Logger } from '../log/logger';
import { migrate } from '../db/migrate';
import type { SlotBackendStatus } from '../../shared/protocol';
import { cleanDeadRows, ensurePool, liveHolders, MAX_POOL_SLOTS, type HolderRow, type PoolRow } from './pgSlotSql';
import { PgStationKeeper } from './pgStationKeeper';
import { slotBackendCause } from './slotBackendCause';

/** How often the holders of every station are read for `status` (a read never waits for PostgreSQL). */
const HOLDERS_REFRESH_MS = 1000;
/** How often rows of dead sessions are deleted (readers ignore them anyway). */
const CLEAN_MS = 10_000;

export interface PgSlotBackendOptions {
  url: string;
  station: string;
  /** Each pool's slot count used to seed core.pool when no station has made its row yet. */
  defaults: ReadonlyMap<string, number>;
  logger: Logger;
  /** dist/pgSlotKeeper.js: the station's lock keeper. */
  keeperPath: string;
  /** The folder of the keeper's socket (in the agent's home; made 0700). */
  keeperDir: string;
}

/**
 * The agent's one connection to the shared slot database. It queues tickets, reads whose turn
 * it is, and keeps a copy of every station's holders for a status that never blocks. It holds no slot
 * itself: the locks are the station keeper's (pgSlotKeeper.ts), so they outlive this process.
 */
export class PgSlotBackend {
  /** The station's lock keeper, shared by its pools. */
  readonly keeper: PgStationKeeper;
  private client: pg.Client | null = null;
  private connecting: Promise<pg.Client> | null = null;
  private holders: HolderRow[] = [];
  private readonly pools = new Map<string, PoolRow>();
  private refreshTimer: NodeJS.Timeout | null = null;
  private lastClean = 0;
  private closed = false;
  private broken = false;
  /** Whether the database can be used now, and why not (shown by `status`). */
  private health: Pick<SlotBackendStatus, 'state' | 'error'> = { state: 'unreachable', error: 'not connected yet' };
  /** Whether PUBLIC may connect to the slot database (any role can then take advisory locks there); null until known. */
  private publicConnect: boolean | null = null;
  /** Holder rows numbered beyond any pool's size, already logged (pool/slot): ignored, logged once. */
  private readonly oddRows = new Set<string>();
  private readonly keepersBlocked = new Map<string, { state: 'unreachable' | 'connection-cap'; error: string }>();

  constructor(private readonly opts: PgSlotBackendOptions) {
    this.keeper = new PgStationKeeper({
      keeperPath: opts.keeperPath,
      dir: opts.keeperDir,
      station: opts.station,
      url: opts.url,
      logger: opts.logger,
    });
  }

  get station(): string {
    return this.opts.station;
  }

  get url(): string {
    return this.opts.url;
  }

  /**
   * Connects, checks that the URL is a direct session (not a transaction pooler), brings the schema up
   * to date and seeds core.pool. A pooler is a ConfigError (exit 78): session locks cannot work there.
   * A database that is down or at its connection cap does not stop the start: the backend opens
   * degraded (runs wait, `status` says why) and connects when it can.
   */
  async open(): Promise<void> {
    refusePoolerUrl(this.opts.url);
    try {
      await this.use(async () => {});
    } catch (err) {
      const code = (err as { code?: unknown }).code;
      // A refused login or a database that does not exist will not pass by waiting: the setting is wrong.
      if (typeof code === 'string' && (code.startsWith('28') || code === '3D000')) {
        throw new ConfigError([
          `QUANTILICA_SLOT_DATABASE_URL=${JSON.stringify(redactCredentials(this.opts.url))}: ${(err as Error).message}`,
        ]);
      }
      if (slotBackendCause(err as Error) === null) throw err;
      this.opts.logger.warn(
        { err: (err as Error).message, setting: 'QUANTILICA_SLOT_DATABASE_URL' },
        'slot database unreachable at start: runs wait for it; the agent connects when it can',
      );
    }
    await this.refresh();
    this.refreshTimer ??= setInterval(() => {
      void this.refresh();
    }, HOLDERS_REFRESH_MS);
    this.refreshTimer.unref();
  }

  /** The backend's health for `status`: its own connection's, else the pools' keepers'. */
  status(): SlotBackendStatus {
    const keepers = [...this.keepersBlocked.values()][0];
    const health = this.health.state === 'ok' && keepers ? keepers : this.health;
    return { ...health, publicConnect: this.publicConnect };
  }

  /** A pool's keepers cannot connect (the cap, an outage), or can again (null). */
  keepersCannotConnect(pool: string, blocked: { state: 'unreachable' | 'connection-cap'; error: string } | null): void {
    if (blocked === null) this.keepersBlocked.delete(pool);
    else this.keepersBlocked.set(pool, blocked);
  }

  /** Whether the database could be used at the last try (a CLI run refuses to queue when not). */
  get reachable(): boolean {
    return this.health.state === 'ok';
  }

  /** The live connection, made again after a loss (the tickets of the lost one died with it). */
  private async connection(): Promise<pg.Client> {
    if (this.closed) throw new Error('the slot backend is closed');
    if (this.client && !this.broken) return this.client;
    this.connecting ??= this.connect().finally(() => {
      this.connecting = null;
    });
    return this.connecting;
  }

  /** Whether the connection was lost since `generation` was taken: tickets of a lost one are gone. */
  generation = 0;
  private queue: Promise<unknown> = Promise.resolve();

  /**
   * Runs `fn` with the connection, one caller at a time: the pools' waiting loops and the holders'
   * refresh share it, and a pg client must not be given a query while another is in flight.
   */
  use<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
    const turn = this.queue.then(async () => {
      let client: pg.Client;
      try {
        client = await this.connection();
      } catch (err) {
        this.health = { state: slotBackendCause(err as Error) ?? 'unreachable', error: (err as Error).message };
        throw err;
      }
      return fn(client);
    });
    this.queue = turn.catch(() => {});
    return turn;
  }

  private async connect(): Promise<pg.Client> {
    const client = new (loadPg().Client)({
      connectionString: this.opts.url,
      application_name: `quantilica-agent ${this.opts.station}`,
      keepAlive: true,
      connectionTimeoutMillis: 10_000,
    });
    client.on('error', (err) => {
      if (this.client !== client) return;
      this.broken = true;
      this.health = { state: 'unreachable', error: err.message };
      this.opts.logger.warn({ err: err.message }, 'slot database connection lost: no new slots until it is back');
    });
    client.on('end', () => {
      if (this.client !== client) return;
      this.broken = true;
      this.health = { state: 'unreachable', error: 'the connection ended' };
    });
    try {
      await client.connect();
      await client.query('SET search_path = pg_catalog, pg_temp');
      await checkSession(client, this.opts.url);
      await migrate(client, this.opts.logger);
      // Seeded on every connection: after a degraded start the first one is the first chance.
      for (const [name, slots] of this.opts.defaults) this.pools.set(name, await ensurePool(client, name, slots));
      await this.checkPublicConnect(client);
    } catch (err) {
      await client.end().catch(() => {});
      throw err;
    }
    const old = this.client;
    this.client = client;
    this.broken = false;
    this.health = { state: 'ok', error: null };
    this.generation += 1;
    if (old) void old.end().catch(() => {});
    return client;
  }

  /**
   * Any role that may connect to the slot database can take advisory locks on the pools' keys: it cannot
   * book a slot of ours (only our role's sessions count), but it can hold slot numbers and keep every
   * station busy skipping them. Said at every connection while PUBLIC has CONNECT, and in `status`.
   */
  private async checkPublicConnect(client: pg.Client): Promise<void> {
    const row = (
      await client.query<{ public: boolean; db: string }>(
        "SELECT pg_catalog.has_database_privilege('public', pg_catalog.current_database(), 'CONNECT') AS public, pg_catalog.current_database() AS db",
      )
    ).rows[0];
    const was = this.publicConnect;
    this.publicConnect = row?.public ?? null;
    if (this.publicConnect === true && was !== true) {
      this.opts.logger.warn(
        { database: row?.db },
        `any role may connect to the slot database (PUBLIC has CONNECT) and take its advisory locks; ` +
          `run REVOKE CONNECT ON DATABASE ${row?.db ?? '…'} FROM PUBLIC and GRANT CONNECT to the stations' role`,
      );
    }
  }

  /** The pool's shared row as last read (its size is what every station agrees on). */
  pool(name: string): PoolRow | undefined {
    return this.pools.get(name);
  }

  setPool(name: string, row: PoolRow): void {
    this.pools.set(name, row);
  }

  holdersOf(pool: string): HolderRow[] {
    return this.holders.filter((h) => h.pool === pool);
  }

  async refresh(): Promise<void> {
    if (this.closed) return;
    try {
      await this.use(async (client) => {
        if (Date.now() - this.lastClean > CLEAN_MS) {
          this.lastClean = Date.now();
          await cleanDeadRows(client);
        }
        this.holders = this.plausible(await liveHolders(client));
        const rows = (await client.query<{ name: string; slots: number; lock_key: number }>('SELECT name, slots, lock_key FROM core.pool'))
          .rows;
        for (const r of rows) this.pools.set(r.name, { slots: r.slots, lockKey: r.lock_key });
      });
    } catch {
      // Unreachable: the copy stays as it was; the wait loops say why they wait.
    }
  }

  /**
   * Rows numbered outside any pool's possible size (another station's user sharing the role may write
   * core.slot_holder) are nobody's slot: a status built from them would be an array up to their number.
   * Ignored, and logged once each.
   */
  private plausible(rows: HolderRow[]): HolderRow[] {
    return rows.filter((h) => {
      if (Number.isInteger(h.slot) && h.slot >= 0 && h.slot < MAX_POOL_SLOTS) return true;
      const key = `${h.pool}/${h.slot}`;
      if (!this.oddRows.has(key)) {
        this.oddRows.add(key);
        this.opts.logger.warn(
          { pool: h.pool, slot: h.slot, station: h.station, maxSlots: MAX_POOL_SLOTS },
          "ignored a core.slot_holder row numbered beyond any pool's size",
        );
      }
      return false;
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    // The keeper takes no new slot and exits once its fetchers are gone.
    this.keeper.close();
    if (this.refreshTimer) clearInterval(this.refreshTimer);
    this.refreshTimer = null;
    const client = this.client;
    this.client = null;
    await client?.end().catch(() => {});
  }
}

/**
 * PgBouncer in transaction (or statement) mode hands each transaction to any server session, so a
 * session advisory lock would be taken on one session and counted on another. Its default port and
 * the `pgbouncer` URL flag (Prisma's convention) are refused before connecting.
 */
export function refusePoolerUrl(url: string): void {
  const parsed = new URL(url);
  const pooler = parsed.port === '6432' || parsed.searchParams.has('pgbouncer') || /pgbouncer|pooler/i.test(parsed.hostname);
  if (pooler) {
    throw new ConfigError([
      `QUANTILICA_SLOT_DATABASE_URL=${JSON.stringify(redactCredentials(url))}: looks like a connection pooler (PgBouncer); ` +
        'the postgres slot backend holds session advisory locks and needs a direct connection to PostgreSQL (not port 6432, no pgbouncer flag)',
    ]);
  }
}

/**
 * The same connection must stay on the same server session: a lock taken in one statement must be
 * seen as ours in the next. Behind a transaction pooler the second statement may land elsewhere.
 */
async function checkSession(client: pg.Client, url: string): Promise<void> {
  const probe = 0x5153_4c54; // 'QSLT' with this session's pid: a key nobody else uses, released right after.
  const first =
    (
      await client.query<{ pid: number }>(
        'SELECT pg_catalog.pg_backend_pid() AS pid, pg_catalog.pg_try_advisory_lock($1, pg_catalog.pg_backend_pid())',
        [probe],
      )
    ).rows[0]?.pid ?? -1;
  try {
    const mine = (
      await client.query<{ n: string }>(
        `SELECT count(*) AS n FROM pg_catalog.pg_locks
      WHERE locktype = 'advisory' AND granted AND pid = $2 AND pid = pg_catalog.pg_backend_pid()
        AND classid = $1::integer::oid AND objid = $2::integer::oid AND objsubid = 2`,
        [probe, first],
      )
    ).rows[0]?.n;
    if (Number(mine) !== 1) {
      throw new ConfigError([
        `QUANTILICA_SLOT_DATABASE_URL=${JSON.stringify(redactCredentials(url))}: statements of one connection do not stay on one server session ` +
          '(a transaction pooler such as PgBouncer?); the postgres slot backend needs a direct connection',
      ]);
    }
  } finally {
    await client.query('SELECT pg_catalog.pg_advisory_unlock($1, $2)', [probe, first]).catch(() => {});
  }
}
