import { parentPort } from 'node:worker_threads';
import { spawnRun, type SpawnOptions } from './runProcess';
import type { SpawnReply, SpawnRequest } from './threadSpawner';

/**
 * The worker thread that starts runs (threadSpawner.ts). Descriptors are the process's, so the log
 * and slot descriptors the main thread opened are handed to the child by number, as in-thread.
 */
const port = parentPort;
if (!port) throw new Error('runSpawnWorker.js runs as a worker thread of the agent');
port.on('message', (request: SpawnRequest) => {
  let reply: SpawnReply;
  try {
    const proc = spawnRun(request.opts satisfies SpawnOptions);
    reply = { type: 'spawned', id: request.id, pid: proc.pid, startTime: proc.startTime };
    void proc.exited.then((exit) => port.postMessage({ type: 'exited', id: request.id, exit } satisfies SpawnReply));
  } catch (err) {
    reply = { type: 'error', id: request.id, message: (err as Error).message };
  }
  port.postMessage(reply);
});
