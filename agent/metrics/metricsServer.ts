import * as http from 'node:http';
import { ConfigError } from '../config/configError';
import type { Logger } from '../log/logger';

export interface MetricsListen {
  host: string;
  port: number;
  /** The host was given in the setting (not the loopback default). */
  explicit: boolean;
}

export interface MetricsServer {
  readonly port: number;
  close(): Promise<void>;
}

const isLoopback = (host: string) => host === '::1' || host.startsWith('127.');

/**
 * Serves `GET /metrics` (Prometheus' text format) and nothing else: no token, as Prometheus expects,
 * so it listens on the loopback unless an address is given, and then says so in the log.
 */
export async function startMetricsServer(
  listen: MetricsListen,
  metrics: () => Promise<{ contentType: string; body: Buffer }>,
  logger: Logger,
): Promise<MetricsServer> {
  const server = http.createServer((req, res) => {
    const url = req.url ?? '';
    const pathName = url.split('?')[0];
    if (pathName !== '/metrics') {
      res.writeHead(404, { 'Content-Type': 'text/plain; charset=utf-8' }).end('only /metrics is served here\n');
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { 'Content-Type': 'text/plain; charset=utf-8', Allow: 'GET, HEAD' }).end('only GET /metrics\n');
      return;
    }
    metrics().then(
      // Bytes with their length: nothing to measure or encode on the way out.
      ({ contentType, body }) => {
        res.writeHead(200, { 'Content-Type': contentType, 'Content-Length': body.length }).end(req.method === 'HEAD' ? undefined : body);
      },
      (err: unknown) => {
        res.writeHead(500, { 'Content-Type': 'text/plain; charset=utf-8' }).end(`metrics failed: ${String(err)}\n`);
      },
    );
  });
  server.headersTimeout = 10_000;
  server.requestTimeout = 10_000;
  const port = await new Promise<number>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      reject(
        new ConfigError([
          `QUANTILICA_METRICS_LISTEN=${listen.host}:${listen.port}: cannot listen (${err.code ?? err.message}); choose another address or port`,
        ]),
      );
    });
    server.listen(listen.port, listen.host, () => {
      const address = server.address();
      resolve(address !== null && typeof address !== 'string' ? address.port : listen.port);
    });
  });
  if (listen.explicit && !isLoopback(listen.host)) {
    logger.warn(
      { event: 'metrics-listen', host: listen.host, port },
      `metrics: serving /metrics on ${listen.host}:${port}, beyond the loopback and without a token: anyone who reaches this address reads the station's metrics`,
    );
  } else {
    logger.info(
      { event: 'metrics-listen', host: listen.host, port },
      `metrics: serving http://${listen.host.includes(':') ? `[${listen.host}]` : listen.host}:${port}/metrics`,
    );
  }
  return {
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
