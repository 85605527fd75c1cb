import type pg from 'pg';
import { loadPg } from '../db/loadPg';
import type { Logger } from '../log/logger';
import { errorText } from './openSpoolDatabase';

export interface TelemetryDatabaseOptions {
  url: string;
  logger: Logger;
  /** Shown in pg_stat_activity, so an operator (or a test) can find the flushing connection. */
  applicationName?: string;
  connectTimeoutMs?: number;
  queryTimeoutMs?: number;
}

export const DEFAULT_APPLICATION_NAME = 'quantilica-telemetry-flush';

/** The session's search_path, set at connection start (libpq's `options`). */
export const PINNED_SEARCH_PATH_OPTION = '-c search_path=pg_catalog,pg_temp';

/**
 * The flush's PostgreSQL pool, made so that a dropped connection is an error to report and never a
 * crash: idle and busy clients both have an 'error' listener, every connect and query has a timeout
 * (client side and server side), and a client that failed is destroyed rather than reused.
 */
export class TelemetryDatabase {
  private readonly pool: pg.Pool;
  private readonly fresh = new WeakSet<pg.PoolClient>();

  constructor(private readonly options: TelemetryDatabaseOptions) {
    const queryTimeout = options.queryTimeoutMs ?? 60_000;
    this.pool = new (loadPg().Pool)({
      connectionString: options.url,
      max: 2,
      idleTimeoutMillis: 30_000,
      connectionTimeoutMillis: options.connectTimeoutMs ?? 5_000,
      query_timeout: queryTimeout,
      statement_timeout: queryTimeout,
      lock_timeout: queryTimeout,
      idle_in_transaction_session_timeout: queryTimeout * 2,
      application_name: options.applicationName ?? DEFAULT_APPLICATION_NAME,
      // Every statement of the flush sees only the catalog and fully-qualified core.* names: a table or
      // function someone put in a schema earlier on the path (public, "$user") cannot shadow ours.
      options: PINNED_SEARCH_PATH_OPTION,
      keepAlive: true,
      // The CLI must exit when its flush is done, without waiting for idle clients to time out.
      allowExitOnIdle: true,
    });
    // Idle clients: pg-pool forwards their errors (a pg_terminate_backend, a server restart) here;
    // without a listener the 'error' event would be thrown and end the process.
    this.pool.on('error', (err) => {
      options.logger.warn({ err: errorText(err) }, 'idle telemetry database connection lost');
    });
    this.pool.on('connect', (client) => {
      this.fresh.add(client);
    });
  }

  /**
   * Runs `fn` with a checked-out client. A pooled client that was killed while idle is only found out
   * on its first use; that case is retried once on a new connection (the flush is idempotent).
   */
  async use<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt += 1) {
      const client = await this.pool.connect();
      const reused = !this.fresh.delete(client);
      // pg-pool removes its own listener from a checked-out client: a connection error while our query
      // runs must land somewhere other than an unhandled 'error' event.
      const onError = (err: Error) => {
        this.options.logger.warn({ err: errorText(err) }, 'telemetry database connection lost during a flush');
      };
      client.on('error', onError);
      let failure: unknown = null;
      try {
        return await fn(client);
      } catch (err) {
        failure = err;
        if (attempt === 0 && reused && isConnectionError(err)) continue;
        throw err;
      } finally {
        client.off('error', onError);
        // A client that failed in any way may be mid-transaction or half-closed: destroy it.
        client.release(failure === null ? undefined : failure instanceof Error ? failure : new Error(errorText(failure)));
      }
    }
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}

/** True when the error says the database cannot be reached (as opposed to a statement it refused). */
export function isConnectionError(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (/^(08|57P0[123]|53300)/.test(code)) return true;
    if (/^E[A-Z]+$/.test(code)) return true; // ECONNREFUSED, ECONNRESET, ETIMEDOUT, ENOTFOUND, EPIPE…
    if (/^[0-9A-Z]{5}$/.test(code)) return false;
  }
  const message = err instanceof Error ? err.message : String(err);
  return /Connection terminated|timeout|ECONNREFUSED|ECONNRESET|connect|Client has encountered a connection error|not queryable/i.test(
    message,
  );
}
