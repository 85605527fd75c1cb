import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as readline from 'node:readline';

/**
 * Agents the suite starts and kills itself (to change the disk thresholds, to test reconnection), as
 * real `quantilica agent` processes with the environment runOffline.mjs gave the extension host.
 */
export class AgentProcesses {
  private readonly children = new Set<ChildProcess>();

  constructor(
    private readonly agentJs: string,
    private readonly nodePath: string,
    private readonly logDir: string,
  ) {}

  /** Starts an agent and resolves once it printed its ready line. */
  async start(extraEnv: Record<string, string> = {}): Promise<ChildProcess> {
    fs.mkdirSync(this.logDir, { recursive: true });
    const log = fs.openSync(path.join(this.logDir, `agent-${Date.now()}.log`), 'a');
    const child = spawn(this.nodePath, [this.agentJs, 'agent'], { env: { ...process.env, ...extraEnv }, stdio: ['ignore', 'pipe', log] });
    fs.closeSync(log);
    this.children.add(child);
    child.once('exit', () => this.children.delete(child));
    const lines = readline.createInterface({ input: child.stdout! });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the agent was not ready within 30 s (log in ${this.logDir})`)), 30_000);
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`the agent exited with ${code} before it was ready (log in ${this.logDir})`));
      });
      lines.on('line', (line) => {
        if (line.includes('"ready":true')) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    child.removeAllListeners('exit');
    child.once('exit', () => this.children.delete(child));
    return child;
  }

  /**
   * Records a telemetry event through `quantilica telemetry emit`, a process of its own writing into
   * the agent's spool file, as a script outside the agent would; returns the run id it was filed under.
   */
  emitEvent(task: string): string {
    const out = execFileSync(this.nodePath, [this.agentJs, 'telemetry', 'emit', 'start', '--task', task, '--pool', 'heavy-io'], {
      env: process.env,
      encoding: 'utf8',
    });
    const runId = / of run ([0-9a-f-]{36}) /.exec(out)?.[1];
    if (!runId) throw new Error(`telemetry emit printed no run id: ${out}`);
    return runId;
  }

  /** Sends `signal` to the agent with this pid (ours or one the extension started) and waits for its end. */
  async stop(pid: number, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    try {
      process.kill(pid, signal);
    } catch {
      return;
    }
    const deadline = Date.now() + 30_000;
    while (alive(pid)) {
      if (Date.now() > deadline) throw new Error(`agent ${pid} still alive 30 s after ${signal}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  async stopAll(): Promise<void> {
    await Promise.all([...this.children].map((c) => (c.pid ? this.stop(c.pid) : Promise.resolve())));
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  // A killed child of this process stays a zombie until reaped; it is gone for our purpose.
  try {
    return !/^\d+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}
