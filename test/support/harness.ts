import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as readline from 'node:readline';
import { loadConfig, type Config } from '../../agent/config/config';
import { memoryLogger } from './memoryLogger';
import { removeAtExit } from './removeAtExit';
import { openCore } from '../../agent/compose/openCore';
import type { Orchestrator } from '../../agent/orchestrator';
import type { RunManager } from '../../agent/runs/runManager';
import type { RunInfo } from '../../shared/protocol';

/** The repository root, from out/test/support. */
export const REPO = path.resolve(__dirname, '..', '..', '..');
export const AGENT_JS = path.join(REPO, 'dist', 'agent.js');
export const FIXTURES = path.join(REPO, 'test', 'fixtures');
export const OUT_FIXTURES = path.join(REPO, 'out', 'test', 'fixtures');

export interface FetcherSpec {
  name: string;
  pool: 'heavy-io' | 'cpu-analysis' | 'network-light';
  argv: string[];
  env?: Record<string, string>;
  expectedSizeMb?: number;
  /** Defaults to true here (the catalog's own default is false): the tests pass arguments freely. */
  extraArgs?: boolean | string;
  passEnv?: string[];
  /** memory ceilings */
  memoryMb?: number;
  /** Run policies (catalog.ts): retries, timeout, stall watchdog. */
  retry?: { attempts: number; backoffSeconds?: number; maxBackoffSeconds?: number; exitCodes?: number[] };
  retryMemoryLimit?: boolean;
  retryOnTimeout?: boolean;
  timeoutSeconds?: number;
  stallSeconds?: number;
  onStall?: 'mark' | 'cancel';
}

export interface TestEnv {
  root: string;
  home: string;
  lockDir: string;
  dataDir: string;
  env: NodeJS.ProcessEnv;
}

/** A private station: its own HOME, lock dir, data dir and catalog, in a temp dir (removed when the test process exits). */
export function makeTestEnv(fetchers: FetcherSpec[] | null, extra: Record<string, string> = {}, shared?: { lockDir?: string }): TestEnv {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-'));
  removeAtExit(root);
  const home = path.join(root, 'home');
  const lockDir = shared?.lockDir ?? path.join(root, 'locks');
  const dataDir = path.join(root, 'data');
  fs.mkdirSync(home, { recursive: true });
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    // The test reads times the CLI prints in its own zone: both use the same one.
    ...(process.env.TZ !== undefined ? { TZ: process.env.TZ } : {}),
    HOME: home,
    QUANTILICA_LOCK_DIR: lockDir,
    DATA_DIR: dataDir,
    CRON_USE_POOLS: 'true',
    QUANTILICA_CANCEL_GRACE_SECONDS: '1',
    QUANTILICA_LOG_LEVEL: 'warn',
    QUANTILICA_TELEMETRY_SPOOL: path.join(home, '.quantilica', 'telemetry_spool.db'),
    // Tests are about slots and processes, not the machine's free space: the gate stays open.
    CRON_DISK_PAUSE_GB: '0.0001',
    CRON_DISK_WARN_GB: '0.0002',
    CRON_DISK_RESUME_GB: '0.0002',
    // A test must not start the demo schedule's catch-up runs.
    QUANTILICA_SCHEDULE_CATCH_UP: 'false',
    ...extra,
  };
  if (fetchers) {
    const catalogPath = path.join(root, 'catalog.json');
    fs.writeFileSync(catalogPath, JSON.stringify({ fetchers: fetchers.map((f) => ({ extraArgs: true, ...f })) }, null, 2));
    env.QUANTILICA_CATALOG = catalogPath;
  }
  return { root, home, lockDir, dataDir, env };
}

export function testConfig(t: TestEnv): Config {
  return loadConfig(t.env);
}

/**
 * The agent's core in this process, as an in-process CLI run has it, with a real spool (the
 * composition root's core alone: no disk gate, flusher or schedule). `runManager`, `store` and
 * `pools` are the parts the root made, for what a test looks at beside the facade.
 */
export function openOrchestrator(t: TestEnv, overrides: Partial<Config> = {}) {
  const config = { ...testConfig(t), ...overrides };
  const logger = memoryLogger();
  const core = openCore(config, logger, { fallbackPath: path.join(t.root, 'fallback-spool.db') });
  const { runs, store, pools } = core.parts;
  return {
    orchestrator: core.control,
    runManager: runs,
    store,
    pools,
    spool: core.spool,
    logger,
    close: () => core.close(false),
  };
}

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs the bundled `quantilica` command as a real process. */
export function runCli(t: TestEnv | NodeJS.ProcessEnv, args: string[], timeoutMs = 60000): Promise<CliResult> {
  const env = 'env' in t && typeof t.env === 'object' ? (t as TestEnv).env : (t as NodeJS.ProcessEnv);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [AGENT_JS, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`quantilica ${args.join(' ')} did not end within ${timeoutMs} ms; stderr: ${stderr}`));
    }, timeoutMs);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/**
 * `quantilica runs --json [...extra]` (extra: e.g. `--limit 50`, `--fetcher github`): the station's runs, newest
 * first (the agent's answer while one runs). Throws if the command exits non-zero.
 */
export async function listRuns(t: TestEnv | NodeJS.ProcessEnv, extra: string[] = []): Promise<RunInfo[]> {
  const args = ['runs', '--json', ...extra];
  const r = await runCli(t, args);
  if (r.code !== 0) throw new Error(`quantilica ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  return (JSON.parse(r.stdout) as { runs: RunInfo[] }).runs;
}

/** Starts `quantilica agent` and resolves once it prints its ready line. */
export function startAgent(t: TestEnv, extraArgs: string[] = []): Promise<{ child: ChildProcess; stderr: () => string }> {
  return readyAgent(spawn(process.execPath, [AGENT_JS, 'agent', ...extraArgs], { env: t.env, stdio: ['ignore', 'pipe', 'pipe'] }));
}

/**
 * Resolves once an agent started by the caller (as another user, with a descriptor left open, …)
 * prints its ready line on its piped stdout; rejects when it exits first or is not ready within 30 s,
 * with what it wrote to its piped stderr, or what `output` reads (a log file its stderr goes to).
 */
export async function readyAgent(child: ChildProcess, output?: () => string): Promise<{ child: ChildProcess; stderr: () => string }> {
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const said = output ?? (() => stderr);
  const lines = readline.createInterface({ input: child.stdout! });
  let onExit: (code: number | null) => void = () => undefined;
  let timer: NodeJS.Timeout | undefined;
  try {
    await new Promise<void>((resolve, reject) => {
      timer = setTimeout(() => reject(new Error(`agent not ready within 30 s; stderr: ${said()}`)), 30000);
      onExit = (code) => reject(new Error(`agent exited with ${code} before ready; stderr: ${said()}`));
      child.once('exit', onExit);
      lines.on('line', (line) => {
        if (line.includes('"ready":true')) resolve();
      });
    });
  } finally {
    clearTimeout(timer);
    child.off('exit', onExit);
  }
  return { child, stderr: () => stderr };
}

/**
 * True while any process of the group lives. Zombies do not count: a process whose parent died is
 * reaped by init, which here may take seconds, and a zombie holds no slot and does no work.
 */
export function groupExists(pgid: number): boolean {
  return groupMembers(pgid).length > 0;
}

/** PIDs of every live, non-zombie process in a group (scans /proc). */
export function groupMembers(pgid: number): number[] {
  // 0 is the kernel threads' group (it never empties): a pid read from a file before it was written.
  if (!Number.isInteger(pgid) || pgid <= 1) throw new Error(`not a process group of a test: ${pgid}`);
  const members: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[2]) === pgid && fields[0] !== 'Z') members.push(Number(entry));
    } catch {
      // The process ended while we looked.
    }
  }
  return members;
}

/** Cancels every active run of an orchestrator and waits until each has ended. */
export async function stopAll(orchestrator: Orchestrator, runs: RunManager): Promise<void> {
  const active = runs.activeRuns();
  for (const run of active) runs.cancel(run.runId);
  await Promise.all(active.map((run) => orchestrator.waitRun(run.runId)));
}
