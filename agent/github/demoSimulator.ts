import { spawn, type ChildProcess } from 'node:child_process';
import * as readline from 'node:readline';
import type { Logger } from '../log/logger';
import { distFile } from '../paths';

/**
 * The demo's GitHub: the bundled simulator (dist/githubSimulator.js) on a free loopback port, with a
 * quota window of 20 s, small enough that the demo sync hibernates once or twice and resumes within a
 * minute. Started at the first demo sync, stopped with the agent; it also exits when its stdin closes,
 * so an agent killed with -9 leaves no simulator behind.
 */
export const DEMO_SIMULATOR_ARGS = [
  '--port',
  '0',
  '--repos',
  '8',
  '--pull-requests',
  '12',
  '--runs',
  '6',
  '--jobs',
  '2',
  '--limit',
  '30',
  '--window',
  '20',
  '--latency',
  '30',
  '--exit-with-stdin',
];

export class DemoSimulator {
  private child: ChildProcess | null = null;
  private started: Promise<string> | null = null;

  constructor(private readonly logger: Logger) {}

  url(): Promise<string> {
    this.started ??= this.spawn();
    this.started.catch(() => {
      this.started = null;
    });
    return this.started;
  }

  async stop(): Promise<void> {
    const child = this.child;
    this.child = null;
    this.started = null;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  }

  private spawn(): Promise<string> {
    return new Promise((resolve, reject) => {
      // No environment: the simulator needs none, and the agent's holds its secrets.
      const child = spawn(process.execPath, [distFile('githubSimulator.js'), ...DEMO_SIMULATOR_ARGS], {
        stdio: ['pipe', 'pipe', 'inherit'],
        env: {},
      });
      this.child = child;
      const lines = readline.createInterface({ input: child.stdout });
      child.once('error', reject);
      child.once('exit', (code) => {
        if (this.child === child) this.child = null;
        reject(new Error(`the demo GitHub simulator exited (${code})`));
      });
      lines.once('line', (line) => {
        try {
          const { url } = JSON.parse(line) as { url: string };
          this.logger.info({ url, pid: child.pid }, 'demo GitHub simulator started');
          resolve(url);
        } catch (err) {
          reject(err instanceof Error ? err : new Error(String(err)));
        }
      });
    });
  }
}
