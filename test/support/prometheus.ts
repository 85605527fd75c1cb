import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { REPO } from './harness';
import { waitFor } from './waitFor';

/** Debian's `prometheus` package unpacked (never installed): its server and promtool. */
export interface PrometheusTools {
  prometheus: string;
  promtool: string;
}

const CACHE = path.join(REPO, '.cache', 'prometheus');

/**
 * Fetches Debian's `prometheus` package with apt (`apt-get download`, after `apt-get update` when the
 * lists are empty) and unpacks it with `dpkg -x` into `.cache/prometheus` (git-ignored), once; no
 * service is installed or started.
 */
export function prometheusTools(): PrometheusTools {
  const tools = { prometheus: path.join(CACHE, 'usr', 'bin', 'prometheus'), promtool: path.join(CACHE, 'usr', 'bin', 'promtool') };
  if (fs.existsSync(tools.prometheus) && fs.existsSync(tools.promtool)) return tools;
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-prometheus-'));
  try {
    const download = () => execFileSync('apt-get', ['download', 'prometheus'], { cwd: work, stdio: 'pipe' });
    try {
      download();
    } catch {
      execFileSync('apt-get', ['update'], { stdio: 'pipe' });
      download();
    }
    const deb = fs.readdirSync(work).find((f) => f.endsWith('.deb'));
    if (deb === undefined) throw new Error('apt-get download prometheus left no .deb');
    const unpacked = path.join(work, 'root');
    execFileSync('dpkg', ['-x', path.join(work, deb), unpacked], { stdio: 'pipe' });
    fs.mkdirSync(path.dirname(CACHE), { recursive: true });
    // A rename, so a concurrent test sees the whole tree or none of it.
    try {
      fs.renameSync(unpacked, CACHE);
    } catch (err) {
      if (!fs.existsSync(tools.prometheus)) throw err;
    }
    return tools;
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

export interface RunningPrometheus {
  url: string;
  /** An instant query's result vector. */
  query(expr: string): Promise<Array<{ metric: Record<string, string>; value: [number, string] }>>;
  stop(): Promise<void>;
  log(): string;
}

/** A Prometheus server on a free loopback port with its own config and storage, scraping `target` every second. */
export async function startPrometheus(tools: PrometheusTools, target: string, dir: string): Promise<RunningPrometheus> {
  const port = await freePort();
  const config = path.join(dir, 'prometheus.yml');
  fs.writeFileSync(
    config,
    [
      'global:',
      '  scrape_interval: 1s',
      '  scrape_timeout: 1s',
      'scrape_configs:',
      '  - job_name: quantilica',
      '    static_configs:',
      `      - targets: ['${target}']`,
      '',
    ].join('\n'),
  );
  const child: ChildProcess = spawn(
    tools.prometheus,
    [`--config.file=${config}`, `--storage.tsdb.path=${path.join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let log = '';
  child.stderr?.on('data', (d: Buffer) => {
    log = (log + d.toString()).slice(-20_000);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  await waitFor(
    async () => {
      if (child.exitCode !== null) throw new Error(`prometheus exited ${child.exitCode}: ${log}`);
      try {
        return (await fetch(`${url}/-/ready`)).status === 200;
      } catch {
        return false;
      }
    },
    { what: 'prometheus to be ready (/-/ready)', timeoutMs: 60_000, intervalMs: 100 },
  );
  return {
    url,
    query: async (expr) => {
      const res = await fetch(`${url}/api/v1/query?query=${encodeURIComponent(expr)}`);
      const body = (await res.json()) as {
        status: string;
        data?: { result: Array<{ metric: Record<string, string>; value: [number, string] }> };
      };
      if (body.status !== 'success' || !body.data) throw new Error(`query ${expr}: ${JSON.stringify(body)}`);
      return body.data.result;
    },
    stop: async () => {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
    },
    log: () => log,
  };
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
