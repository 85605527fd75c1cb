import * as path from 'node:path';
import pg from 'pg';
import { makeTestEnv, OUT_FIXTURES, type FetcherSpec, type TestEnv } from './harness';
export { maxConcurrent } from './maxConcurrent';

// Stations sharing one PostgreSQL slot backend. Each has its own QUANTILICA_HOME, lock dir
// and DATA_DIR (makeTestEnv gives each its own root), only the database is shared.

/** A catalog of one fetcher that logs its start and stop (holdSlot.js) on a log shared by all stations. */
export function holdCatalog(logFile: string, pool: FetcherSpec['pool'] = 'heavy-io'): FetcherSpec[] {
  return [{ name: 'hold', pool, argv: [process.execPath, path.join(OUT_FIXTURES, 'holdSlot.js'), logFile] }];
}

export function pgStation(url: string, station: string, fetchers: FetcherSpec[], extra: Record<string, string> = {}): TestEnv {
  return makeTestEnv(fetchers, {
    QUANTILICA_SLOT_BACKEND: 'postgres',
    QUANTILICA_SLOT_DATABASE_URL: url,
    QUANTILICA_STATION: station,
    ...extra,
  });
}

/**
 * An observer independent of the agents: its own connection, polling PostgreSQL's lock table for the
 * pool's advisory locks and the processes that are alive holding a slot (their QUANTILICA_POOL env).
 */
export class SlotObserver {
  maxLocks = 0;
  samples = 0;
  private stopped = false;
  private loop: Promise<void> | null = null;
  private readonly client: pg.Client;

  constructor(
    url: string,
    private readonly pool: string,
  ) {
    this.client = new pg.Client({ connectionString: url });
    this.client.on('error', () => {});
  }

  async start(): Promise<void> {
    await this.client.connect();
    this.loop = (async () => {
      while (!this.stopped) {
        const n = await this.locks();
        this.samples += 1;
        this.maxLocks = Math.max(this.maxLocks, n);
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
  }

  /** The pool's advisory locks held now, from pg_locks (what PostgreSQL itself counts). */
  async locks(): Promise<number> {
    const r = await this.client.query<{ n: string }>(
      `SELECT count(*) AS n FROM pg_locks l JOIN core.pool p ON l.classid = p.lock_key::oid
      WHERE p.name = $1 AND l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted`,
      [this.pool],
    );
    return Number(r.rows[0].n);
  }

  query<T extends pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<pg.QueryResult<T>> {
    return this.client.query<T>(sql, params);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop?.catch(() => {});
    await this.client.end().catch(() => {});
  }
}
