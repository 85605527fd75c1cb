import { spawn, type ChildProcessByStdio } from 'node:child_process';
import * as fs from 'node:fs';
import type { Readable, Writable } from 'node:stream';
import { SpawnerExit } from '../helperExitCodes';
import type { Logger } from '../log/logger';
import { makeJoinFolders } from '../memory/makeJoinFolders';
import { createLogIn, openMadeLog } from './runLogFile';
import { decodeExit, type ExitInfo, type RunProcess, type SpawnOptions } from './runProcess';
import type { RunSpawner } from './runPorts';
import { NUL_REFUSED } from './fetcherEnv';

/** errno values of "F … pidfd-getfd" that say the kernel will never allow it here (Yama, seccomp, an old kernel). */
const NEVER_HERE = new Set([1 /* EPERM */, 13 /* EACCES */, 38 /* ENOSYS */]);

interface Pending {
  opts: SpawnOptions;
  started: boolean;
  resolve: (proc: RunProcess) => void;
  reject: (err: Error) => void;
  exited: (exit: ExitInfo | null) => void;
  exitedPromise: Promise<ExitInfo | null>;
}

/**
 * Starts the agent's runs through agent/native/quantilica-spawner.c (the hot path): a small
 * long-lived process that forks cheaply, takes the slot and log descriptors from the agent with
 * pidfd_getfd(2), is the fetchers' parent and writes their status files, also after the agent died.
 * It replaces, per run, a fork of the whole agent and the two shells of runWrapper.sh.
 *
 * When the spawner was not built (no C compiler at `npm run build`) or the kernel refuses it the
 * agent's descriptors, every spawn goes to `fallback` (the worker thread and runWrapper.sh), which
 * keeps the same guarantees at a higher cost. Runs it started are followed as before: the fetcher
 * leads its own group, and the status file is where the next agent finds its exit.
 */
export class NativeSpawner implements RunSpawner {
  private child: ChildProcessByStdio<Writable, Readable, null> | null = null;
  private readonly pending = new Map<string, Pending>();
  private nextId = 1;
  private disabled: string | null = null;
  private buffered = '';
  /** The answers' pipe kept ref'd while a spawn is unanswered, let go with its last answer (the spawner may be closed meanwhile). */
  private held: (Readable & { unref?(): void }) | null = null;

  readonly watch: RunSpawner['watch'];
  readonly signal: RunSpawner['signal'];
  readonly members: RunSpawner['members'];
  readonly findGroup: RunSpawner['findGroup'];
  readonly ownerAlive: RunSpawner['ownerAlive'];
  readonly readStatus: RunSpawner['readStatus'];

  constructor(
    private readonly binary: string,
    private readonly fallback: RunSpawner & { close?(): Promise<void> },
    private readonly logger: Logger,
  ) {
    // Groups, signals and status files are the same whoever forked the run.
    this.watch = (...a) => fallback.watch(...a);
    this.signal = (...a) => fallback.signal(...a);
    this.members = (...a) => fallback.members(...a);
    this.findGroup = (...a) => fallback.findGroup(...a);
    this.ownerAlive = (...a) => fallback.ownerAlive(...a);
    this.readStatus = (...a) => fallback.readStatus(...a);
    if (!isExecutable(binary)) {
      this.disabled = 'not-built';
      logger.warn(
        { binary },
        'the native spawner was not built (no C compiler at npm run build): fetchers are started by the worker thread under runWrapper.sh',
      );
    }
  }

  /** Why spawns go to the fallback (a token), or null while the native spawner is used. */
  get fallbackReason(): string | null {
    return this.disabled;
  }

  spawn(opts: SpawnOptions): Promise<RunProcess> {
    if (this.disabled !== null) return this.byFallback(opts);
    const id = String(this.nextId++);
    let request: Buffer;
    try {
      request = encodeRequest(id, opts);
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    const child = this.child ?? this.start();
    let exited!: (exit: ExitInfo | null) => void;
    const exitedPromise = new Promise<ExitInfo | null>((r) => {
      exited = r;
    });
    return new Promise<RunProcess>((resolve, reject) => {
      this.pending.set(id, { opts, started: false, resolve, reject, exited, exitedPromise });
      this.holdWhileUnanswered();
      // The runs a group commit lets start all ask in the same turn: one write to the pipe for all of
      // them, once this turn's callbacks are done, rather than one system call each.
      if (child.stdin.writableCorked === 0) {
        child.stdin.cork();
        process.nextTick(() => child.stdin.uncork());
      }
      child.stdin.write(request);
    });
  }

  /** Whether this spawner's waiters make a run's v1 cgroup folders (cgroup_begin): while spawns are not sent to the fallback. */
  get makesRunFolders(): boolean {
    return this.disabled === null;
  }

  /**
   * Whether a first try's log is made by the run's waiter (make_log): always, for the runs the
   * fallback starts make theirs here first (byFallback).
   */
  readonly makesLogs = true;

  /**
   * A spawn the fallback starts: runWrapper.sh joins the run's cgroup folders, it does not make them;
   * nor does it make logs, so a log left to the waiter is made here, with the agent's own checks (a
   * file planted under its name is refused with why).
   */
  private async byFallback(opts: SpawnOptions, waiterMayHaveMadeLog = false): Promise<RunProcess> {
    const { logToMake, ...rest } = opts;
    if (logToMake === undefined) {
      makeJoinFolders(opts.env.QUANTILICA_CGROUP_PROCS);
      return this.fallback.spawn(opts);
    }
    const logFd =
      (waiterMayHaveMadeLog ? openMadeLog(opts.logFd, logToMake.dir, logToMake.name) : null) ??
      createLogIn(opts.logFd, logToMake.dir, logToMake.name);
    try {
      makeJoinFolders(opts.env.QUANTILICA_CGROUP_PROCS);
      return await this.fallback.spawn({ ...rest, logFd });
    } finally {
      fs.closeSync(logFd);
    }
  }

  /** Takes no more requests; the spawner sees the runs it started to their end, then exits. */
  async close(): Promise<void> {
    this.disabled ??= 'closed';
    const child = this.child;
    this.child = null;
    child?.stdin.end();
    await this.fallback.close?.();
  }

  private start(): ChildProcessByStdio<Writable, Readable, null> {
    // Its own session: a signal to the agent's terminal or group does not reach the fetchers' parent.
    // An empty environment: each run's waiter is a fork of the spawner, and a fetcher can read its
    // parent's /proc/PID/environ; every variable a run needs comes with its request.
    const child = spawn(this.binary, [], { detached: true, stdio: ['pipe', 'pipe', 'inherit'], env: {} });
    // The agent may exit while fetchers run on: the spawner is not its to wait for.
    child.unref();
    (child.stdin as Writable & { unref?(): void }).unref?.();
    (child.stdout as Readable & { unref?(): void }).unref?.();
    child.stdin.on('error', () => {
      /* the spawner is gone: 'close' below handles its runs */
    });
    child.stdout.setEncoding('latin1');
    child.stdout.on('data', (text: string) => this.onAnswers(text));
    // It could not be started, or it stopped before reading any request (no pidfd of its parent, an
    // old kernel; no signalfd; the kernel refuses it the agent's descriptors, which it tries at once):
    // nothing was forked, so the fallback starts the runs.
    child.once('error', (err) => this.unusable(child, 'spawner-not-started', err.message));
    child.once('close', (code, signal) => {
      if (code === SpawnerExit.descriptorsRefused) this.unusable(child, 'pidfd-getfd-refused', `exit ${code}`);
      else if (code === SpawnerExit.noParent || code === SpawnerExit.noSignalfd) this.unusable(child, 'spawner-refused', `exit ${code}`);
      else this.lost(child, `spawner-exited: ${signal ?? code}`);
    });
    this.child = child;
    return child;
  }

  private onAnswers(text: string): void {
    const lines = (this.buffered + text).split('\n');
    this.buffered = lines.pop() ?? '';
    for (const line of lines) {
      const [kind, id, a, b] = line.split(' ');
      const p = id === undefined ? undefined : this.pending.get(id);
      if (p === undefined) continue;
      if (kind === 'S') {
        p.started = true;
        p.resolve({ pid: Number(a), startTime: Number(b), exited: p.exitedPromise });
      } else if (kind === 'E') {
        this.pending.delete(id);
        p.exited(decodeExit(Number(a), null));
      } else if (kind === 'F') {
        this.pending.delete(id);
        const errno = Number(a);
        if (b === 'pidfd-getfd' && NEVER_HERE.has(errno)) this.disable(`pidfd-getfd-refused`, errno);
        // Nothing was forked: the fallback starts this run. After "fork" the waiter was, and may have
        // made the log before it died.
        this.byFallback(p.opts, b === 'fork').then(p.resolve, p.reject);
      }
    }
    this.holdWhileUnanswered();
  }

  private unusable(child: ChildProcessByStdio<Writable, Readable, null>, reason: string, detail: string): void {
    if (this.child === child) this.child = null;
    this.fallBack(reason, { detail });
    for (const [id, p] of this.pending) {
      this.pending.delete(id);
      this.byFallback(p.opts).then(p.resolve, p.reject);
    }
    this.holdWhileUnanswered();
  }

  /**
   * The answers' pipe is unref'd, so that an agent may exit while its fetchers run on; but one
   * stopping while a spawn is on its way (no "S" or "F" yet) must wait for the answer: otherwise it
   * exits with the fetcher started and neither its start recorded nor a cancel asked for meanwhile
   * applied, and the run is left `waiting` (reason `starting`) for the next agent to adopt as if
   * still wanted. Called after every change to `pending`; it holds the few runs in flight.
   */
  private holdWhileUnanswered(): void {
    let unanswered = false;
    for (const p of this.pending.values())
      if (!p.started) {
        unanswered = true;
        break;
      }
    if (unanswered && this.held === null && this.child !== null) {
      this.held = this.child.stdout;
      (this.held as Readable & { ref?(): void }).ref?.();
    } else if (!unanswered && this.held !== null) {
      this.held.unref?.();
      this.held = null;
    }
  }

  private disable(reason: string, errno: number): void {
    if (this.disabled !== null) return;
    this.fallBack(reason, { errno });
    this.child?.stdin.end();
    this.child = null;
  }

  /** From now on every spawn goes to the fallback; said once, with why and what starts fetchers instead. */
  private fallBack(reason: string, fields: Record<string, unknown>): void {
    if (this.disabled !== null) return;
    this.disabled = reason;
    const why =
      reason === 'pidfd-getfd-refused'
        ? "the kernel refuses the native spawner the agent's descriptors (pidfd_getfd(2) needs leave to ptrace the agent: refused under a Yama ptrace_scope of 1 or more without CAP_SYS_PTRACE, by a seccomp filter, or before Linux 5.6)"
        : 'the native spawner cannot run here';
    this.logger.warn(
      { reason, ...fields },
      `${why}; fetchers are started by the worker thread under runWrapper.sh from now on (the same guarantees, more CPU per run)`,
    );
  }

  /** The spawner died: a run it was starting may or may not have started, so that spawn fails; started runs are followed by their group. */
  private lost(child: ChildProcessByStdio<Writable, Readable, null>, why: string): void {
    if (this.child === child) this.child = null;
    for (const [id, p] of this.pending) {
      this.pending.delete(id);
      if (p.started) p.exited(null);
      else p.reject(new Error(why));
    }
    this.holdWhileUnanswered();
  }
}

function isExecutable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** u32 LE length, then NUL-terminated: id, lockFd, logFd, logName (empty: logFd is the log), statusFile, cwd, argc, argv…, envc, env… */
export function encodeRequest(id: string, opts: SpawnOptions): Buffer {
  const own: string[] = [];
  for (const [name, value] of Object.entries(opts.env)) {
    if (value === undefined) continue;
    // The shared part is encoded already: a run's own variable there would be sent twice.
    if (opts.shared?.vars[name] !== undefined) throw new Error(`${name} is both a shared and a run's own variable`);
    own.push(`${name}=${value}`);
  }
  const fields = [
    id,
    String(opts.lockFd),
    String(opts.logFd),
    opts.logToMake?.name ?? '',
    opts.statusFile,
    opts.cwd,
    String(opts.argv.length),
    ...opts.argv,
  ];
  if (fields.some((f) => f.includes('\0')) || own.some((e) => e.includes('\0'))) throw new Error(NUL_REFUSED);
  const shared = opts.shared?.encoded ?? new Uint8Array(0);
  const head = Buffer.from(`${fields.join('\0')}\0${(opts.shared?.count ?? 0) + own.length}\0`, 'utf8');
  const tail = Buffer.from(own.map((e) => `${e}\0`).join(''), 'utf8');
  const length = Buffer.alloc(4);
  length.writeUInt32LE(head.length + shared.length + tail.length, 0);
  return Buffer.concat([length, head, shared, tail]);
}
