import { parentPort, workerData } from 'node:worker_threads';
import { createLogger } from '../log/logger';
import type { LegRequest, LegMessage } from './runLegInWorker';
import { runGithubSync } from './runGithubSync';
import { openGithubStore } from './store/openGithubStore';
import { SyncTimeoutError } from './syncTimeoutError';
import { storageLossCause } from './store/storageLost';

// The worker thread of one leg of an in-agent GitHub sync (runLegInWorker.ts): its requests, JSON,
// database round trips and garbage stay off the agent's event loop, which keeps answering clients.
const request = workerData as LegRequest;
const port = parentPort!;
const controller = new AbortController();
port.on('message', (message: { type: 'abort'; reason?: { timeoutSeconds: number } | null }) => {
  if (message.type === 'abort')
    controller.abort(message.reason ? new SyncTimeoutError(message.reason.timeoutSeconds) : new Error('cancelled'));
});
const send = (message: LegMessage) => port.postMessage(message);
// A storage that is away (opening it, or reading the sync before the stages) is an outcome the agent waits out, not an error.
const fail = (err: unknown) => {
  const cause = storageLossCause(err);
  const message = err instanceof Error ? err.message : String(err);
  if (cause !== null) send({ type: 'outcome', outcome: { kind: 'storage-lost', syncId: request.syncId, cause, message } });
  else send({ type: 'error', message });
};

void (async () => {
  const logger = createLogger('quantilica-agent', request.logLevel);
  let store;
  try {
    store = await openGithubStore({ databaseUrl: request.databaseUrl, homeDir: request.homeDir, logger });
  } catch (err) {
    fail(err);
    return;
  }
  try {
    const outcome = await runGithubSync({
      store,
      client: request.client,
      resume: request.syncId,
      logger,
      signal: controller.signal,
      concurrency: request.concurrency,
      onProgress: (status) => send({ type: 'progress', status }),
    });
    send({ type: 'outcome', outcome });
  } catch (err) {
    fail(err);
  } finally {
    await store.db.close().catch(() => {});
    // Nothing keeps the thread alive after this: it ends once the outcome is sent.
    port.unref();
  }
})();
