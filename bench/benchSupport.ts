import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as readline from 'node:readline';
import { removeAtExit } from '../test/support/removeAtExit';

/** Helpers shared by the benchmarks: percentiles, idle sampling of a process, a printed table. */

/**
 * A benchmark's numeric setting (an environment variable, or an argument called `name` in the
 * message): `fallback` when unset or empty. Anything else that is not a number in [min, max] (a whole
 * one where `whole`) stops the benchmark with one line naming the setting and what it takes, exit 64
 * (EX_USAGE), before it has made or started anything: a typo must not turn into a run of NaN rounds.
 */
export function benchNumber(
  name: string,
  raw: string | undefined,
  fallback: number,
  range: { min: number; max: number; whole?: boolean },
): number {
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (Number.isFinite(n) && n >= range.min && n <= range.max && (range.whole !== true || Number.isInteger(n))) return n;
  process.stderr.write(
    `${name} must be ${range.whole === true ? 'a whole number' : 'a number'} from ${range.min} to ${range.max}, not ${JSON.stringify(raw)}\n`,
  );
  process.exit(64);
}

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const at = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[at];
}

/** CPU ticks (user + system, USER_HZ: 100 a second) of a process from /proc. */
export function cpuTicks(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

/** A process's RSS and, within it, the pages of mapped files (RssFile: node's binary, shared libraries), in MB. */
function rssMb(pid: number): { rssMb: number; fileRssMb: number } {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? 0);
  return { rssMb: kb('VmRSS') / 1024, fileRssMb: kb('RssFile') / 1024 };
}

/**
 * The CPU share (% of one core) and final RSS of an idle process over a wall-clock window. The file
 * pages in it are shared with every process that maps the same files, and how many of them are
 * resident moves with the machine's page cache: the rest (anonymous) is the process's own.
 */
export async function sampleIdle(pid: number, seconds: number): Promise<{ rssMb: number; fileRssMb: number; cpuPercent: number }> {
  const ticksPerSecond = 100; // USER_HZ on Linux
  const before = cpuTicks(pid);
  const started = Date.now();
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  const elapsed = (Date.now() - started) / 1000;
  const used = (cpuTicks(pid) - before) / ticksPerSecond;
  return { ...rssMb(pid), cpuPercent: (used / elapsed) * 100 };
}

export function printTable(title: string, rows: Array<[string, string, string]>): void {
  const w0 = Math.max(...rows.map((r) => r[0].length));
  const w1 = Math.max(...rows.map((r) => r[1].length));
  process.stdout.write(`\n${title}\n`);
  for (const [a, b, c] of rows) process.stdout.write(`  ${a.padEnd(w0)}  ${b.padStart(w1)}  ${c}\n`);
}

/** The agent the benchmarks drive, as a user runs it (the bundle `npm run build` writes). */
export const AGENT_JS = path.resolve(__dirname, '..', '..', 'dist', 'agent.js');

/**
 * Starts `dist/agent.js agent` with `env` and resolves once it prints its ready line (60 s at most).
 * BENCH_AGENT_NODE_ARGS adds options for the agent's node (`--cpu-prof --cpu-prof-dir=/tmp/prof` to
 * see where its main thread goes; node refuses those in NODE_OPTIONS).
 */
export async function startAgent(env: NodeJS.ProcessEnv): Promise<ChildProcess> {
  const nodeArgs = (process.env.BENCH_AGENT_NODE_ARGS ?? '').split(' ').filter((a) => a !== '');
  const child = spawn(process.execPath, [...nodeArgs, AGENT_JS, 'agent'], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = readline.createInterface({ input: child.stdout });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the agent was not ready within 60 s')), 60_000);
    child.once('exit', (code) => reject(new Error(`the agent exited with ${code}`)));
    lines.on('line', (line) => {
      if (line.includes('"ready":true')) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  return child;
}

/** Stops an agent the benchmark started (SIGTERM) and waits for its exit; its station goes when the benchmark ends. */
export async function stopAgent(agent: ChildProcess, root: string): Promise<void> {
  if (agent.exitCode === null && agent.signalCode === null) {
    const exited = new Promise((resolve) => agent.once('exit', resolve));
    agent.kill('SIGTERM');
    await exited;
  }
  removeAtExit(root);
}

/**
 * A bench station's environment under `root`: its own home, lock folder, data folder and catalog,
 * pools on, quiet logs, no schedule catch-up. `home` defaults to `root/home`.
 */
export function benchStationEnv(root: string, catalog: string, home = path.join(root, 'home')): NodeJS.ProcessEnv {
  return {
    ...process.env,
    HOME: home,
    QUANTILICA_LOCK_DIR: path.join(root, 'locks'),
    DATA_DIR: path.join(root, 'data'),
    CRON_USE_POOLS: 'true',
    QUANTILICA_CATALOG: catalog,
    QUANTILICA_LOG_LEVEL: 'warn',
    QUANTILICA_SCHEDULE_CATCH_UP: 'false',
  };
}
