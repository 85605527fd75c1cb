import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as readline from 'node:readline';
import type { Logger } from '../log/logger';

/** How long the keeper may take to start and say where its socket is. */
const READY_MS = 30_000;

export interface PgStationKeeperOptions {
  /** dist/pgSlotKeeper.js */
  keeperPath: string;
  /** The folder of the keepers' sockets (in the agent's home; 0700). */
  dir: string;
  station: string;
  url: string;
  logger: Logger;
}

/** What a take comes to: a slot and its lifeline, the pool full, or why the keeper could not try. */
export type TakeAnswer = { acquired: number; lifeline: net.Socket; id: string } | { busy: true } | { error: string; code?: string };

export interface TakeHandlers {
  /** The slot's session was lost: the keeper has killed the run's process group. */
  onLost(why: string): void;
  /** The slot is free again (its fetcher's last process closed the lifeline, or the keeper ended). */
  onReleased(): void;
}

interface KeeperProcess {
  child: ChildProcess;
  token: string;
  ready: Promise<string>;
  exited: boolean;
}

/**
 * The agent's side of its station's lock keeper (pgSlotKeeper.ts): one process holding every slot
 * the station's runs hold, started on the first take with an empty environment, the slot database's
 * URL and a token on its stdin. Each take is a connection to the keeper's socket; once a slot is
 * acquired that connection is the slot's lifeline, handed to the fetcher as its fd 3.
 * The keeper is not adopted by a later agent: when this agent ends, its keeper takes no new slot and
 * exits once the fetchers holding its slots are gone; the next agent starts a keeper of its own.
 */
export class PgStationKeeper {
  private proc: KeeperProcess | null = null;
  private readonly slots = new Map<string, TakeHandlers>();
  private nextId = 0;
  private closed = false;

  constructor(private readonly opts: PgStationKeeperOptions) {}

  /** Asks the keeper for a free slot of `pool` for `runId`. `signal` gives up the take (and a slot it got). */
  async take(pool: string, runId: string, handlers: TakeHandlers, signal: AbortSignal): Promise<TakeAnswer> {
    if (this.closed) return { error: 'the agent is stopping' };
    const proc = this.running();
    let socketPath: string;
    try {
      socketPath = await proc.ready;
    } catch (err) {
      return { error: (err as Error).message, code: (err as { code?: string }).code };
    }
    const id = `${process.pid}-${++this.nextId}`;
    const sock = net.connect(socketPath);
    // Its end comes when the keeper releases the slot; nothing here waits for it.
    sock.on('error', () => {});
    const onAbort = () => sock.destroy();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      const line = await firstLine(sock, JSON.stringify({ token: proc.token, id, pool, take: runId }));
      const msg = JSON.parse(line) as { acquired?: unknown; busy?: unknown; error?: unknown; code?: unknown };
      if (typeof msg.acquired === 'number') {
        // Nothing more comes on it: the fetcher gets it as it is, and a read here would race the fetcher's.
        sock.pause();
        this.slots.set(id, handlers);
        return { acquired: msg.acquired, lifeline: sock, id };
      }
      sock.destroy();
      if (msg.busy === true) return { busy: true };
      return {
        error: typeof msg.error === 'string' ? msg.error : 'the slot keeper failed',
        code: typeof msg.code === 'string' ? msg.code : undefined,
      };
    } catch (err) {
      sock.destroy();
      if (signal.aborted) return { error: 'the take was given up' };
      // The keeper ended meanwhile (or its socket is gone): the next take starts a new one.
      if (this.proc === proc) this.forget(proc);
      return { error: `the slot keeper did not answer: ${(err as Error).message}`, code: 'keeper-gone' };
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
  }

  /** Names the process group of the run holding slot `id` (null: in-agent work, never killed). */
  record(id: string, record: { pid: number | null; fetcher: string | null; runId: string | null; since: string | null }): void {
    this.proc?.child.stdin?.write(`${JSON.stringify({ record: { id, ...record } })}\n`);
  }

  /** Whether slot `id` is still held (its keeper has not said it was released). */
  holds(id: string): boolean {
    return this.slots.has(id);
  }

  /** The agent is stopping: its keeper takes no new slot, and exits once its held slots are released. */
  close(): void {
    this.closed = true;
    this.proc?.child.stdin?.end();
  }

  private running(): KeeperProcess {
    if (this.proc && !this.proc.exited) return this.proc;
    // A small heap: the keeper holds a few sessions and sockets, and its RSS is counted per station.
    const child = spawn(
      process.execPath,
      ['--max-semi-space-size=1', '--max-old-space-size=32', this.opts.keeperPath, this.opts.station, this.opts.dir],
      {
        // Its own session: a Ctrl-C or a signal to the agent's group must not end the slot of a running fetcher.
        detached: true,
        stdio: ['pipe', 'pipe', 'ignore'],
        // No environment: a fetcher can read any /proc/PID/environ of this account; the URL (a secret)
        // goes as the first line of the keeper's stdin.
        env: {},
      },
    );
    const token = randomBytes(32).toString('hex');
    let readyFor: (p: string) => void = () => {};
    let failed: (e: Error) => void = () => {};
    const ready = new Promise<string>((resolve, reject) => {
      readyFor = resolve;
      failed = reject;
    });
    ready.catch(() => {});
    const proc: KeeperProcess = { child, token, ready, exited: false };
    this.proc = proc;
    const timer = setTimeout(() => {
      failed(new Error(`the slot keeper did not start within ${READY_MS / 1000} s`));
      child.kill('SIGKILL');
    }, READY_MS);
    timer.unref();
    child.stdin?.on('error', () => {});
    child.stdin?.write(`${JSON.stringify({ url: this.opts.url, token })}\n`);
    child.on('error', (err) => failed(new Error(`cannot start the slot keeper: ${err.message}`)));
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      failed(new Error(`the slot keeper exited (${signal ?? code})`));
      this.forget(proc);
    });
    // The keeper lives on by itself, also after this agent ends: the agent's pipes do not keep it running.
    child.unref();
    (child.stdout as net.Socket | null)?.unref();
    (child.stdin as net.Socket | null)?.unref();
    readline.createInterface({ input: child.stdout }).on('line', (line) => {
      let msg: { ready?: unknown; error?: unknown; code?: unknown; lost?: unknown; released?: unknown; id?: unknown };
      try {
        msg = JSON.parse(line) as typeof msg;
      } catch {
        return;
      }
      if (typeof msg.ready === 'string') {
        clearTimeout(timer);
        if (checkSocket(msg.ready)) readyFor(msg.ready);
        else {
          failed(new Error(`the slot keeper's socket ${msg.ready} is not a private socket of this account`));
          child.kill('SIGKILL');
        }
      } else if (typeof msg.lost === 'string' && typeof msg.id === 'string') {
        this.slots.get(msg.id)?.onLost(msg.lost);
      } else if (typeof msg.released === 'string') {
        const h = this.slots.get(msg.released);
        this.slots.delete(msg.released);
        h?.onReleased();
      } else if (typeof msg.error === 'string') {
        failed(Object.assign(new Error(msg.error), { code: typeof msg.code === 'string' ? msg.code : undefined }));
      }
    });
    return proc;
  }

  /** The keeper ended: every slot it held is free (its sessions ended with it). */
  private forget(proc: KeeperProcess): void {
    proc.exited = true;
    if (this.proc === proc) this.proc = null;
    if (proc.child.exitCode === null && proc.child.signalCode === null) return;
    const held = [...this.slots.values()];
    this.slots.clear();
    for (const h of held) h.onReleased();
  }
}

/** The keeper's socket as it must be: a socket (not a link), of this account, mode 0600 or tighter. */
function checkSocket(p: string): boolean {
  try {
    const st = fs.lstatSync(p);
    return st.isSocket() && st.uid === process.getuid!() && (st.mode & 0o077) === 0;
  } catch {
    return false;
  }
}

/** Writes `line` on the connection and reads the answer's one line. */
function firstLine(sock: net.Socket, line: string): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    let buffered = '';
    const done = (err: Error | null, value = '') => {
      sock.off('data', onData);
      sock.off('error', onError);
      sock.off('close', onClose);
      if (err) reject(err);
      else resolve(value);
    };
    const onData = (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      const nl = buffered.indexOf('\n');
      if (nl >= 0) done(null, buffered.slice(0, nl));
    };
    const onError = (err: Error) => done(err);
    const onClose = () => done(new Error('the keeper closed the connection'));
    sock.on('data', onData);
    sock.on('error', onError);
    sock.on('close', onClose);
    sock.write(`${line}\n`);
  });
}
