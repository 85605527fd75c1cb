import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import { readProcInfo } from '../slots/procInfo';

/** How a run's process ended. `signal` is set when the fetcher (or the wrapper) died of a signal. */
export interface ExitInfo {
  exitCode: number | null;
  signal: string | null;
  /** Set when the exit status could not be learned (the wrapper itself was killed while the agent was down). */
  unknown?: boolean;
}

export interface SpawnOptions {
  wrapperPath: string;
  statusFile: string;
  argv: string[];
  env: NodeJS.ProcessEnv;
  cwd: string;
  logFd: number;
  lockFd: number;
}

export interface RunProcess {
  pid: number;
  /** /proc start time of the wrapper, recorded with the PID so a reused PID is never mistaken for it. */
  startTime: number;
  exited: Promise<ExitInfo>;
}

/**
 * Starts a fetcher under the run wrapper, in its own process group (cancel signals the group), with
 * stdout and stderr on the log file and the slot lock on fd 3. No shell parses argv.
 */
export function spawnRun(opts: SpawnOptions): RunProcess {
  const child = spawn(opts.wrapperPath, [opts.statusFile, ...opts.argv], {
    cwd: opts.cwd,
    env: opts.env,
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

/**
 * Watches a run this process did not start (adopted after an agent restart): it has ended when its
 * PID is gone or names another process; its status is then in the wrapper's status file.
 */
export function watchAdopted(pid: number, startTime: number, statusFile: string, pollMs = 250): { exited: Promise<ExitInfo>; stop: () => void } {
  let timer: NodeJS.Timeout | null = null;
  const exited = new Promise<ExitInfo>((resolve) => {
    const check = () => {
      const info = readProcInfo(pid);
      if (info && info.startTime === startTime && info.state !== 'Z') {
        timer = setTimeout(check, pollMs);
        timer.unref();
        return;
      }
      resolve(readStatusFile(statusFile));
    };
    check();
  });
  return { exited, stop: () => { if (timer) clearTimeout(timer); } };
}

/** The wrapper writes the fetcher's status as one line; an incomplete file counts as missing. */
export function readStatusFile(statusFile: string): ExitInfo {
  let text: string;
  try {
    text = fs.readFileSync(statusFile, 'utf8');
  } catch {
    return { exitCode: null, signal: null, unknown: true };
  }
  if (!text.endsWith('\n') || !/^\d+\n$/.test(text)) return { exitCode: null, signal: null, unknown: true };
  return decodeExit(Number(text.trim()), null);
}

/** sh reports a child killed by signal N as status 128+N; the wrapper exits with that status. */
function decodeExit(code: number | null, signal: NodeJS.Signals | null): ExitInfo {
  if (signal) return { exitCode: null, signal };
  if (code !== null && code > 128 && code < 128 + 65) {
    const name = Object.entries(os.constants.signals).find(([, n]) => n === code - 128)?.[0] ?? null;
    return { exitCode: code, signal: name };
  }
  return { exitCode: code, signal: null };
}
