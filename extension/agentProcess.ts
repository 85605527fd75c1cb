import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';

export interface AgentLaunch {
  /** The bundled agent, `<extension>/dist/agent.js`. */
  agentJs: string;
  /** The Node that runs it: the one the native modules (better-sqlite3, fs-ext) were built for. */
  nodePath: string;
  /** Where the agent's stdout and stderr go; it outlives the window, so no pipe to this process. */
  logFile: string;
}

/**
 * Starts `quantilica agent` detached, as the user would from a terminal: it is the user's agent, not
 * the window's, and keeps running (with its fetchers) when the window closes. Resolves with its pid
 * once the process exists; whether it is ready shows by the session connecting.
 */
export function launchAgent(launch: AgentLaunch, onExit: (code: number | null, logTail: string) => void): Promise<number> {
  fs.mkdirSync(path.dirname(launch.logFile), { recursive: true });
  const out = fs.openSync(launch.logFile, 'a', 0o600);
  try {
    const child = spawn(launch.nodePath, [launch.agentJs, 'agent'], {
      detached: true,
      stdio: ['ignore', out, out],
      cwd: path.dirname(launch.agentJs),
      env: process.env,
    });
    return new Promise((resolve, reject) => {
      child.once('error', (err) => reject(new Error(`cannot start ${launch.nodePath} ${launch.agentJs}: ${err.message}`)));
      child.once('spawn', () => {
        child.once('exit', (code) => onExit(code, tail(launch.logFile, 2000)));
        child.unref();
        resolve(child.pid ?? 0);
      });
    });
  } finally {
    fs.closeSync(out);
  }
}

/** How often a stopping agent is checked for its exit: a pid of another process cannot be waited on. */
const EXIT_POLL_MS = 50;

/** Asks an agent to stop (SIGTERM: running fetchers go on) and waits until it has exited. */
export async function stopAgent(pid: number, timeoutMs = 30_000): Promise<void> {
  if (!alive(pid)) return;
  process.kill(pid, 'SIGTERM');
  const deadline = Date.now() + timeoutMs;
  while (alive(pid)) {
    if (Date.now() > deadline) throw new Error(`the agent (pid ${pid}) did not stop within ${timeoutMs / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, EXIT_POLL_MS));
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The last bytes of a log, for the message when the agent exits at once. */
export function tail(file: string, bytes: number): string {
  try {
    const size = fs.statSync(file).size;
    const fd = fs.openSync(file, 'r');
    try {
      const buffer = Buffer.alloc(Math.min(bytes, size));
      fs.readSync(fd, buffer, 0, buffer.length, size - buffer.length);
      return buffer.toString('utf8');
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    return '';
  }
}
