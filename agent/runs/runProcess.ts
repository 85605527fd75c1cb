import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import { readProcInfo } from '../../shared/node/procInfo';
import { runMembers, type RunGroup } from '../process/runGroup';
import type { WaiterFigures } from '../memory/cgroupLayout';
import type { SharedEnv } from './fetcherEnv';

/** How a run's process ended. `signal` is set when the fetcher (or the wrapper) died of a signal. */
export interface ExitInfo {
  exitCode: number | null;
  signal: string | null;
  /** Set when the exit status could not be learned (the wrapper itself was killed while the agent was down). */
  unknown?: boolean;
  /** When the run ended, if that was before anyone noticed (the status file's time). */
  endedAt?: Date;
  /** The run's cgroup figures, read by the native spawner's waiter, which then removed the cgroup. */
  cgroup?: WaiterFigures;
}

export interface SpawnOptions {
  wrapperPath: string;
  statusFile: string;
  argv: string[];
  /** The run's environment; with `shared`, only the run's own variables (they win over the shared ones). */
  env: NodeJS.ProcessEnv;
  /** What every run of the catalog entry gets, built once (fetcherEnv.ts). */
  shared?: SharedEnv;
  cwd: string;
  /** The run's log; with `logToMake`, the checked log folder in which the spawner makes it. */
  logFd: number;
  /** Set only for a spawner that makes logs (RunSpawner.makesLogs): the log's folder (for messages) and name. */
  logToMake?: { dir: string; name: string };
  lockFd: number;
}

export interface RunProcess {
  pid: number;
  /** /proc start time of the wrapper, recorded with the PID so a reused PID is never mistaken for it. */
  startTime: number;
  /** The wrapper's exit; null when it could not be learned (the run is then followed by its group). */
  exited: Promise<ExitInfo | null>;
}

/**
 * Starts a fetcher under the run wrapper, in its own process group (cancel signals the group), with
 * stdout and stderr on the log file and the slot lock on fd 3. No shell parses argv.
 */
export function spawnRun(opts: SpawnOptions): RunProcess {
  const child = spawn(opts.wrapperPath, [opts.statusFile, ...opts.argv], {
    cwd: opts.cwd,
    env: opts.shared ? { ...opts.shared.vars, ...opts.env } : opts.env,
    detached: true,
    stdio: ['ignore', opts.logFd, opts.logFd, opts.lockFd],
  });
  // The agent must be able to exit while fetchers run on: they are not its to wait for.
  child.unref();
  const exited = new Promise<ExitInfo>((resolve) => {
    child.once('error', () => resolve({ exitCode: 127, signal: null }));
    child.once('exit', (code, signal) => resolve(decodeExit(code, signal)));
  });
  const pid = child.pid;
  if (pid === undefined) {
    return { pid: 0, startTime: 0, exited };
  }
  return { pid, startTime: readProcInfo(pid)?.startTime ?? 0, exited };
}

/** How often the end of a run's group is polled once its wrapper is gone (or not ours to wait for). */
const GROUP_POLL_MS = 250;
/** How long a status file is waited for after the group is gone, when no exit of the run's own came. */
const STATUS_WRITE_GRACE_MS = 5000;

export interface RunWatch {
  /** Resolves once no process of the run is left, with the fetcher's exit. */
  ended: Promise<ExitInfo>;
  stop(): void;
}

/**
 * Follows a run to its real end: the wrapper's exit (when this process started it) is not enough,
 * because processes of the run may outlive it (`sleep 300 & exit 0`, a wrapper killed while its
 * fetcher lives) and they hold the slot. The run has ended once its group is empty; its exit status
 * is then the one the wrapper's subshell recorded in the status file, or else how the wrapper ended.
 *
 * `wrapperExit` is null for a run adopted from an earlier agent: then the wrapper is polled too, and a
 * run whose group was already gone when the watch began ended while nobody watched: its end time is
 * the status file's time.
 */
export function watchRun(
  group: RunGroup,
  statusFile: string,
  wrapperExit: Promise<ExitInfo | null> | null,
  onLingering: (pids: number[]) => void,
): RunWatch {
  let timer: NodeJS.Timeout | null = null;
  let stopped = false;
  const pause = () =>
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, GROUP_POLL_MS);
      timer.unref();
    });
  const ended = (async (): Promise<ExitInfo> => {
    const byWrapper = wrapperExit ? await wrapperExit : null;
    let first = true;
    let noticed = false;
    for (;;) {
      if (stopped) return { exitCode: null, signal: null, unknown: true };
      const members = runMembers(group);
      if (members.length === 0) break;
      if (!noticed && !wrapperAlive(group)) {
        noticed = true;
        onLingering(members);
      }
      first = false;
      await pause();
    }
    let recorded = readStatusFile(statusFile);
    // The native spawner's waiter, which writes the status, is outside the group: with no exit of our
    // own to go by, its write may still be on its way once the group is empty.
    for (let waited = 0; recorded.unknown && byWrapper === null && waited < STATUS_WRITE_GRACE_MS && !stopped; waited += GROUP_POLL_MS) {
      await pause();
      recorded = readStatusFile(statusFile);
    }
    // The file's time is the end only for a run that had ended before the watch began.
    if (!recorded.unknown) return byWrapper === null && first ? recorded : { ...recorded, endedAt: undefined };
    return byWrapper ?? recorded;
  })();
  return {
    ended,
    stop: () => {
      stopped = true;
      if (timer) clearTimeout(timer);
    },
  };
}

function wrapperAlive(group: RunGroup): boolean {
  const info = readProcInfo(group.pgid);
  return info !== null && info.startTime === group.startTime && info.state !== 'Z';
}

/**
 * The fetcher's status, one line (the wrapper's or the native waiter's); the native waiter may add a
 * second: `cgroup <peak bytes> <CPU ns, or -> <OOM kills>`, the run cgroup's figures it read before it
 * removed the cgroup. An incomplete file counts as missing.
 */
const STATUS_RECORD = /^(\d+)\n(?:cgroup (\d+) (\d+|-) (\d+)\n)?$/;
/** More than the longest record: a file this long or longer is no record, read in full or not. */
const STATUS_READ_BYTES = 256;
const { O_RDONLY, O_NOFOLLOW, O_NONBLOCK } = fs.constants;

/**
 * The run's recorded end, `endedAt` the file's time. Opened without following a link and without
 * blocking, and checked on its descriptor: a regular file of ours that nobody else can write, else
 * the status is unknown (the status folder may lie under a shared one: a planted link, FIFO or forged
 * record must neither hang the agent nor end a run with someone else's word).
 */
export function readStatusFile(statusFile: string): ExitInfo {
  let text: string;
  let endedAt: Date;
  const buffer = Buffer.allocUnsafe(STATUS_READ_BYTES);
  try {
    const fd = fs.openSync(statusFile, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
    try {
      const st = fs.fstatSync(fd);
      if (!st.isFile() || st.uid !== (process.getuid?.() ?? st.uid) || (st.mode & 0o022) !== 0) throw new Error('not our status file');
      endedAt = st.mtime;
      text = buffer.toString('latin1', 0, fs.readSync(fd, buffer, 0, STATUS_READ_BYTES, 0));
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    return { exitCode: null, signal: null, unknown: true };
  }
  const record = STATUS_RECORD.exec(text);
  if (record === null) return { exitCode: null, signal: null, unknown: true };
  const [, code, peak, cpu, oom] = record;
  const exit: ExitInfo = { ...decodeExit(Number(code), null), endedAt };
  if (peak !== undefined) exit.cgroup = { peakBytes: Number(peak), cpuNs: cpu === '-' ? null : Number(cpu), oomKills: Number(oom) };
  return exit;
}

/**
 * sh reports a child killed by signal N as status 128+N, and the shell convention is kept when the
 * wrapper itself died of a signal (`fuser -k -KILL` on the slot file): exit code 128+N and the
 * signal's name, so `quantilica run` exits 137 as a shell would.
 */
export function decodeExit(code: number | null, signal: NodeJS.Signals | null): ExitInfo {
  if (signal) {
    const n = os.constants.signals[signal] as number | undefined;
    return { exitCode: n === undefined ? null : 128 + n, signal };
  }
  if (code !== null && code > 128 && code < 128 + 65) {
    const name = Object.entries(os.constants.signals).find(([, n]) => n === code - 128)?.[0] ?? null;
    return { exitCode: code, signal: name };
  }
  return { exitCode: code, signal: null };
}
