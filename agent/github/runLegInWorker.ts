import * as path from 'node:path';
import { Worker } from 'node:worker_threads';
import type { GithubClientConfig } from './githubClient';
import type { GithubSyncStatus } from './githubSyncStatus';
import type { GithubSyncOutcome } from './runGithubSync';
import { SyncTimeoutError } from './syncTimeoutError';

/** What the leg's worker needs: plain data only (a worker shares no objects with the agent). */
export interface LegRequest {
  syncId: string;
  client: GithubClientConfig;
  databaseUrl: string | null;
  homeDir: string;
  concurrency?: number;
  logLevel: string;
}

export type LegMessage =
  { type: 'progress'; status: GithubSyncStatus } | { type: 'outcome'; outcome: GithubSyncOutcome } | { type: 'error'; message: string };

/** Beside the bundle (dist/agent.js) and beside this file in the compiled tree (out/agent/github). */
const WORKER_JS = path.join(__dirname, 'githubLegWorker.js');

/**
 * One leg of a sync (`runGithubSync({ resume })`) in a worker thread with its own database
 * connections. Why: at concurrency 5 a leg's sockets, JSON and garbage took most of the agent's
 * main thread (a CPU profile: ~80 % busy, most of it writes to PostgreSQL and the API), and a
 * client's `status` waited behind them. Aborting `signal` cancels the leg as in-process (with a
 * SyncTimeoutError as its reason: the leg's timeout).
 */
export function runLegInWorker(
  request: LegRequest,
  signal: AbortSignal,
  onProgress: (status: GithubSyncStatus) => void,
): Promise<GithubSyncOutcome> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(WORKER_JS, { workerData: request });
    let settled = false;
    // Plain data across the thread: a timeout ends the sync `failed` (timeout), any other abort `cancelled`.
    const onAbort = () =>
      worker.postMessage({
        type: 'abort',
        reason: signal.reason instanceof SyncTimeoutError ? { timeoutSeconds: signal.reason.timeoutSeconds } : null,
      });
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    const settle = (fn: () => void) => {
      if (settled) return;
      settled = true;
      signal.removeEventListener('abort', onAbort);
      fn();
    };
    worker.on('message', (message: LegMessage) => {
      if (message.type === 'progress') onProgress(message.status);
      else if (message.type === 'outcome') settle(() => resolve(message.outcome));
      else settle(() => reject(new Error(message.message)));
    });
    worker.once('error', (err) => settle(() => reject(err)));
    worker.once('exit', (code) => settle(() => reject(new Error(`the sync's worker exited (${code}) without an outcome`))));
  });
}
