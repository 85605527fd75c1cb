import pg from 'pg';
import { ConfigError } from '../config/configError';
import { redactCredentials } from '../config/redact';
import type { Logger } from '../log/logger';
import { migrate } from '../telemetry/migrate';
import { cleanDeadRows, ensurePool, liveHolders, type HolderRow, type PoolRow } from './pgSlotSql';

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
}

/**
 * Issue 14: the agent's one connection to the shared slot database. It queues tickets, reads whose turn
 * it is, and keeps a copy of every station's holders for a status that never blocks. It holds no slot
 * itself: the locks are the keepers' (pgSlotKeeper.ts), so they outlive this process.
 */
export class PgSlotBackend {
  private client: pg.Client | null = null;
  private connecting: Promise<pg.Client> | null = null;
  private holders: HolderRow[] = [];
  private readonly pools = new Map<string, PoolRow>();
  private refreshTimer: NodeJS.Timeout | null = null;
  private lastClean = 0;
  private closed = false;
  private broken = false;

  constructor(private readonly opts: PgSlotBackendOptions) {}

  get station(): string {
    return this.opts.station;
  }

  get url(): string {
    return this.opts.url;
  }

  /**
   * Connects, checks that the URL is a direct session (not a transaction pooler), brings the schema up
   * to date and seeds core.pool. A pooler is a ConfigError (exit 78): session locks cannot work there.
   */
  async open(): Promise<void> {
    refusePoolerUrl(this.opts.url);
    await this.use(async (client) => {
      for (const [name, slots] of this.opts.defaults) this.pools.set(name, await ensurePool(client, name, slots));
    });
    await this.refresh();
    this.refreshTimer ??= setInterval(() => { void this.refresh(); }, HOLDERS_REFRESH_MS);
    this.refreshTimer.unref();
  }

  /** The live connection, made again after a loss (the tickets of the lost one died with it). */
  private async connection(): Promise<pg.Client> {
    if (this.closed) throw new Error('the slot backend is closed');
    if (this.client && !this.broken) return this.client;
    this.connecting ??= this.connect().finally(() => { this.connecting = null; });
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
    const turn = this.queue.then(async () => fn(await this.connection()));
    this.queue = turn.catch(() => {});
    return turn;
  }

  private async connect(): Promise<pg.Client> {
    const client = new pg.Client({ connectionString: this.opts.url, application_name: `quantilica-agent ${this.opts.station}`, keepAlive: true, connectionTimeoutMillis: 10_000 });
    client.on('error', (err) => {
      if (this.client !== client) return;
      this.broken = true;
      this.opts.logger.warn({ err: err.message }, 'slot database connection lost: no new slots until it is back');
    });
    client.on('end', () => { if (this.client === client) this.broken = true; });
    try {
      await client.connect();
      await client.query('SET search_path = pg_catalog, pg_temp');
      await checkSession(client, this.opts.url);
      await migrate(client, this.opts.logger);
    } catch (err) {
      await client.end().catch(() => {});
      throw err;
    }
    const old = this.client;
    this.client = client;
    this.broken = false;
    this.generation += 1;
    if (old) void old.end().catch(() => {});
    return client;
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
        this.holders = await liveHolders(client);
        const rows = (await client.query<{ name: string; slots: number; lock_key: number }>('SELECT name, slots, lock_key FROM core.pool')).rows;
        for (const r of rows) this.pools.set(r.name, { slots: r.slots, lockKey: r.lock_key });
      });
    } catch {
      // Unreachable: the copy stays as it was; the wait loops say why they wait.
    }
  }

  async close(): Promise<void> {
    this.closed = true;
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
    throw new ConfigError([`QUANTILICA_SLOT_DATABASE_URL=${JSON.stringify(redactCredentials(url))}: looks like a connection pooler (PgBouncer); `
      + 'the postgres slot backend holds session advisory locks and needs a direct connection to PostgreSQL (not port 6432, no pgbouncer flag)']);
  }
}

/**
 * The same connection must stay on the same server session: a lock taken in one statement must be
 * seen as ours in the next. Behind a transaction pooler the second statement may land elsewhere.
 */
async function checkSession(client: pg.Client, url: string): Promise<void> {
  const probe = 0x5153_4c54; // 'QSLT' with this session's pid: a key nobody else uses, released right after.
  const first = (await client.query<{ pid: number }>('SELECT pg_catalog.pg_backend_pid() AS pid, pg_catalog.pg_try_advisory_lock($1, pg_catalog.pg_backend_pid())', [probe])).rows[0]?.pid ?? -1;
  try {
    const mine = (await client.query<{ n: string }>(`SELECT count(*) AS n FROM pg_catalog.pg_locks
      WHERE locktype = 'advisory' AND granted AND pid = $2 AND pid = pg_catalog.pg_backend_pid()
        AND classid = $1::integer::oid AND objid = $2::integer::oid AND objsubid = 2`, [probe, first])).rows[0]?.n;
    if (Number(mine) !== 1) {
      throw new ConfigError([`QUANTILICA_SLOT_DATABASE_URL=${JSON.stringify(redactCredentials(url))}: statements of one connection do not stay on one server session `
        + '(a transaction pooler such as PgBouncer?); the postgres slot backend needs a direct connection']);
    }
  } finally {
    await client.query('SELECT pg_catalog.pg_advisory_unlock($1, $2)', [probe, first]).catch(() => {});
  }
}
