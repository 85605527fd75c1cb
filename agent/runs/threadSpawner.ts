import * as path from 'node:path';
import { Worker } from 'node:worker_threads';
import { processSpawner } from './processSpawner';
import type { ExitInfo, RunProcess, SpawnOptions } from './runProcess';
import type { RunSpawner } from './runPorts';

export interface SpawnRequest {
  id: number;
  opts: SpawnOptions;
}
export type SpawnReply =
  | { type: 'spawned'; id: number; pid: number; startTime: number }
  | { type: 'exited'; id: number; exit: ExitInfo | null }
  | { type: 'error'; id: number; message: string };

/** Beside the bundle (dist/agent.js) and beside this file in the compiled tree (out/agent/runs). */
const WORKER_JS = path.join(__dirname, 'runSpawnWorker.js');

interface Pending {
  spawned: (proc: { pid: number; startTime: number }) => void;
  failed: (err: Error) => void;
  exited: (exit: ExitInfo | null) => void;
}

/**
 * The real processes, with each spawn made by a worker thread (the hot path). Why: libuv
 * forks the whole agent (~70 MB) for each spawn and blocks the calling thread until the child has
 * exec'd; a CPU profile of 1,000 runs showed that wait as the largest single cost of the main thread,
 * where it delays every client's request and every other run. The fork still copies the agent's
 * address space (a spawner process of its own would avoid that, but Node cannot hand it the slot's
 * descriptor); it just no longer stops the agent.
 *
 * If the worker dies, the runs it started are followed as adopted ones are (their group and status
 * file, `exited` null), and the next spawn starts a new worker.
 */
export class ThreadSpawner implements RunSpawner {
  private worker: Worker | null = null;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private closed = false;

  // Everything but the spawn is the in-thread spawner's.
  readonly watch: RunSpawner['watch'] = (...a) => processSpawner.watch(...a);
  readonly signal: RunSpawner['signal'] = (...a) => processSpawner.signal(...a);
  readonly members: RunSpawner['members'] = (...a) => processSpawner.members(...a);
  readonly findGroup: RunSpawner['findGroup'] = (...a) => processSpawner.findGroup(...a);
  readonly ownerAlive: RunSpawner['ownerAlive'] = (...a) => processSpawner.ownerAlive(...a);
  readonly readStatus: RunSpawner['readStatus'] = (...a) => processSpawner.readStatus(...a);

  spawn(opts: SpawnOptions): Promise<RunProcess> {
    if (this.closed) return processSpawner.spawn(opts);
    const worker = this.worker ?? this.startWorker();
    const id = this.nextId++;
    return new Promise<RunProcess>((resolve, reject) => {
      let exitedResolve!: (exit: ExitInfo | null) => void;
      const exited = new Promise<ExitInfo | null>((r) => {
        exitedResolve = r;
      });
      this.pending.set(id, {
        spawned: ({ pid, startTime }) => resolve({ pid, startTime, exited }),
        failed: (err) => {
          this.pending.delete(id);
          reject(err);
        },
        exited: exitedResolve,
      });
      worker.postMessage({ id, opts } satisfies SpawnRequest);
    });
  }

  /** Stops the worker; later spawns (an agent's last moments) are made in-thread. */
  async close(): Promise<void> {
    this.closed = true;
    const worker = this.worker;
    this.worker = null;
    if (worker) await worker.terminate();
  }

  private startWorker(): Worker {
    // Each run's environment comes with its request; the thread needs none of the agent's (secrets included).
    const worker = new Worker(WORKER_JS, { env: {} });
    // The agent may exit while fetchers run on: they are not its to wait for, nor is this thread.
    worker.unref();
    worker.on('message', (reply: SpawnReply) => {
      const p = this.pending.get(reply.id);
      if (!p) return;
      if (reply.type === 'spawned') p.spawned(reply);
      else if (reply.type === 'error') p.failed(new Error(reply.message));
      else {
        this.pending.delete(reply.id);
        p.exited(reply.exit);
      }
    });
    const lost = (why: string) => {
      if (this.worker === worker) this.worker = null;
      for (const [id, p] of this.pending) {
        p.failed(new Error(why));
        // A run already started is followed like an adopted one (exited null: its group is polled).
        p.exited(null);
        this.pending.delete(id);
      }
    };
    worker.once('error', (err) => lost(`the spawn worker failed: ${err.message}`));
    worker.once('exit', (code) => lost(`the spawn worker exited (${code})`));
    this.worker = worker;
    return worker;
  }
}
