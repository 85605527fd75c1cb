import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { RunInfo } from '../../shared/protocol';
import type { CatalogEntry } from '../../agent/catalog/catalog';
import { memoryLogger } from './memoryLogger';
import { RunManager } from '../../agent/runs/runManager';
import type { Clock, HeldSlot, RunJournal, RunSpawner, SlotSource } from '../../agent/runs/runPorts';
import type { ExitInfo, RunProcess, SpawnOptions } from '../../agent/runs/runProcess';
import type { StoredRun } from '../../agent/runs/runStore';
import type { GateRequest, StartGate } from '../../agent/runs/startGate';
import type { NewTelemetryEvent } from '../../agent/telemetry/telemetrySink';
import type { RunMemory } from '../../agent/memory/runMemory';

// Fakes for the run manager's ports (runPorts.ts): each step a run takes waits for the test to let
// it happen, so a test can cancel, stop or crash the manager at exactly that step.

/** A promise with its resolve and reject outside. */
export function deferred<T>(): { promise: Promise<T>; resolve(value: T): void; reject(err: unknown): void } {
  let resolve!: (value: T) => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Lets microtasks and one macrotask run (the manager's continuations). */
export function settle(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** A gate that holds every run until the test opens it. */
export class FakeGate implements StartGate {
  readonly waiting = new Map<string, { open(): void }>();
  readonly started: string[] = [];
  readonly ended: string[] = [];
  waitToStart(request: GateRequest, signal: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true });
      this.waiting.set(request.runId, {
        open: () => {
          this.waiting.delete(request.runId);
          resolve();
        },
      });
    });
  }
  runStarted(request: GateRequest): void {
    this.started.push(request.runId);
  }
  runEnded(runId: string): void {
    this.ended.push(runId);
  }
}

/** A pool whose slots the test grants; records what was handed back. */
export class FakeSlots implements SlotSource {
  readonly waiters: Array<{ runId: string; grant(index: number): HeldSlot; onPosition(position: number): void }> = [];
  readonly closed: number[] = [];
  releasedCount = 0;
  acquire(runId: string, signal: AbortSignal, onPosition: (position: number) => void = () => {}): Promise<HeldSlot> {
    return new Promise((resolve, reject) => {
      const waiter = {
        runId,
        onPosition,
        grant: (index: number): HeldSlot => {
          this.waiters.splice(this.waiters.indexOf(waiter), 1);
          const slot: HeldSlot = {
            index,
            lock: {
              fd: 100 + index,
              writeRecord: () => {},
              closeOwnCopy: () => {
                this.closed.push(index);
              },
            },
          };
          resolve(slot);
          return slot;
        },
      };
      signal.addEventListener(
        'abort',
        () => {
          const i = this.waiters.indexOf(waiter);
          if (i >= 0) this.waiters.splice(i, 1);
          reject(signal.reason as Error);
        },
        { once: true },
      );
      this.waiters.push(waiter);
    });
  }
  released(): void {
    this.releasedCount += 1;
  }
  /** Tells every queued run its position, `ahead` places behind where it is (as after grants elsewhere). */
  reportPositions(ahead = 0): void {
    this.waiters.forEach((w, i) => w.onPosition(i + 1 + ahead));
  }
  grantNext(index = 0): HeldSlot {
    const next = this.waiters[0];
    if (next === undefined) throw new Error('no run waits for a slot');
    return next.grant(index);
  }
}

interface FakeProcess {
  pid: number;
  opts: SpawnOptions;
  exit(info: ExitInfo): void;
  signals: NodeJS.Signals[];
}

/** Processes that exist only here: spawns wait for `holdSpawns`, exits and signals are the test's. */
export class FakeSpawner implements RunSpawner {
  readonly processes: FakeProcess[] = [];
  private nextPid = 5000;
  spawnGate: Promise<void> | null = null;
  /** Group found by run id in /proc (adoption of a `starting` run). */
  readonly groups = new Map<string, number>();
  readonly statusFiles = new Map<string, ExitInfo>();
  readonly liveOwners = new Set<number>();
  async spawn(opts: SpawnOptions): Promise<RunProcess> {
    if (this.spawnGate) await this.spawnGate;
    const pid = this.nextPid++;
    const ended = deferred<ExitInfo>();
    this.processes.push({ pid, opts, exit: (info) => ended.resolve(info), signals: [] });
    return { pid, startTime: 42, exited: ended.promise };
  }
  watch(
    group: { pgid: number; runId: string },
    statusFile: string,
    exited: Promise<ExitInfo> | null,
  ): { ended: Promise<ExitInfo>; stop(): void } {
    const adopted = deferred<ExitInfo>();
    if (exited === null) {
      const recorded = this.statusFiles.get(statusFile);
      if (recorded && !this.groups.has(group.runId)) adopted.resolve(recorded);
      else this.adoptedExits.set(group.runId, (info) => adopted.resolve(info));
    }
    return { ended: exited ?? adopted.promise, stop: () => {} };
  }
  readonly adoptedExits = new Map<string, (info: ExitInfo) => void>();
  signal(group: { pgid: number }, signal: NodeJS.Signals): boolean {
    const proc = this.processes.find((p) => p.pid === group.pgid);
    proc?.signals.push(signal);
    return proc !== undefined;
  }
  members(): number[] {
    return [];
  }
  findGroup(runId: string): { runId: string; pgid: number; startTime: number } | null {
    const pgid = this.groups.get(runId);
    return pgid === undefined ? null : { runId, pgid, startTime: 7 };
  }
  ownerAlive(run: StoredRun): boolean {
    return this.liveOwners.has(run.ownerPid);
  }
  readStatus(statusFile: string): ExitInfo {
    return this.statusFiles.get(statusFile) ?? { exitCode: null, signal: null, unknown: true };
  }
  of(runId: string): FakeProcess {
    const proc = this.processes.find((p) => p.opts.env.QUANTILICA_RUN_ID === runId);
    if (!proc) throw new Error(`run ${runId} was not spawned`);
    return proc;
  }
}

/** An in-memory journal that records every commit in order; `hold()` keeps commits pending. */
export class FakeJournal implements RunJournal {
  readonly runs = new Map<string, StoredRun>();
  readonly commits: Array<{ run: StoredRun; event: NewTelemetryEvent | null }> = [];
  readonly events: NewTelemetryEvent[] = [];
  private held: Array<() => void> | null = null;
  hold(): void {
    this.held ??= [];
  }
  release(): void {
    const held = this.held ?? [];
    this.held = null;
    for (const go of held) go();
  }
  commit(run: StoredRun, event: NewTelemetryEvent | null): Promise<void> {
    return this.later(() => {
      this.runs.set(run.runId, { ...run });
      this.commits.push({ run: { ...run }, event });
      if (event) this.events.push(event);
    });
  }
  record(event: NewTelemetryEvent): Promise<void> {
    return this.later(() => {
      this.events.push(event);
    });
  }
  get(runId: string): StoredRun | null {
    return this.runs.get(runId) ?? null;
  }
  active(): StoredRun[] {
    return [...this.runs.values()].filter((r) => r.status === 'waiting' || r.status === 'running');
  }
  statesOf(runId: string): string[] {
    return this.commits.filter((c) => c.run.runId === runId).map((c) => c.run.status + (c.run.reason ? `(${c.run.reason})` : ''));
  }
  eventsOf(runId: string): string[] {
    return this.events.filter((e) => e.runId === runId).map((e) => e.event);
  }
  private later(write: () => void): Promise<void> {
    if (this.held === null) {
      write();
      return Promise.resolve();
    }
    return new Promise((resolve) =>
      this.held!.push(() => {
        write();
        resolve();
      }),
    );
  }
}

export const fixedClock: Clock = { now: () => new Date('2026-01-02T03:04:05.000Z') };

const ENTRY: CatalogEntry = { name: 'fetch', pool: 'heavy-io', argv: ['/bin/true'], demo: false, extraArgs: true };

export interface ManagerBed {
  manager: RunManager;
  /** Enqueues a run of `fetch` and lets it through the disk gate: it then waits for a slot. */
  pastGate(): Promise<RunInfo>;
  /** A run of `fetch` through the gate and granted `slot`, its spawn under way until `letSpawn` is called. */
  spawning(slot: number): Promise<{ run: RunInfo; letSpawn: () => void }>;
  /** A run of `fetch` through the gate and granted `slot`, spawned and running. */
  running(slot?: number): Promise<RunInfo>;
  gate: FakeGate;
  slots: FakeSlots;
  spawner: FakeSpawner;
  journal: FakeJournal;
  published: RunInfo[];
  close(): void;
}

/** A run manager on fakes, in a private temp folder (logs and status files are real paths). */
export function managerBed(options: { memory?: RunMemory } = {}): ManagerBed {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qrm-'));
  const gate = new FakeGate();
  const slots = new FakeSlots();
  const spawner = new FakeSpawner();
  const journal = new FakeJournal();
  const published: RunInfo[] = [];
  const manager = new RunManager({
    config: {
      logDir: path.join(root, 'logs'),
      dataDir: root,
      homeDir: root,
      heartbeatSeconds: 3600,
      cancelGraceSeconds: 3600,
      logCapBytes: 1 << 20,
    },
    catalog: {
      resolve: (name) => {
        if (name !== 'fetch') throw new Error(`unknown ${name}`);
        return ENTRY;
      },
    },
    pools: new Map([['heavy-io', slots]]),
    poolOf: (entry) => entry.pool,
    gate,
    journal,
    spawner,
    clock: fixedClock,
    logger: memoryLogger(),
    wrapperPath: '/nonexistent/wrapper',
    self: { pid: 11, startTime: 12 },
    onRunChange: (run) => published.push(run),
    onPoolChange: () => {},
    ...(options.memory ? { memory: options.memory } : {}),
  });
  const pastGate = async (): Promise<RunInfo> => {
    const run = await manager.enqueue('fetch', [], 'cli');
    await settle();
    gate.waiting.get(run.runId)!.open();
    await settle();
    return run;
  };
  const spawning = async (slot: number): Promise<{ run: RunInfo; letSpawn: () => void }> => {
    let letSpawn!: () => void;
    spawner.spawnGate = new Promise((resolve) => {
      letSpawn = resolve;
    });
    const run = await pastGate();
    slots.grantNext(slot);
    await settle();
    return { run, letSpawn };
  };
  const running = async (slot = 0): Promise<RunInfo> => {
    const run = await pastGate();
    slots.grantNext(slot);
    // One turn for the grant's transition, one for the spawn's.
    await settle();
    await settle();
    return run;
  };
  return {
    manager,
    pastGate,
    spawning,
    running,
    gate,
    slots,
    spawner,
    journal,
    published,
    close: () => fs.rmSync(root, { recursive: true, force: true }),
  };
}
