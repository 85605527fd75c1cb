import type { Command } from 'commander';
import * as fs from 'node:fs';
import { loadConfig } from '../config/config';
import { ClientError } from '../errors';
import { ExitCode } from '../exitCodes';
import { createLogger, type Logger } from '../log/logger';
import { BudgetTracker } from './budgetTracker';
import { formatGithubStatus } from './formatGithubStatus';
import { githubClientConfigFromEnv } from './githubClient';
import { githubSyncStatus, type GithubSyncStatus } from './githubSyncStatus';
import { runGithubSync, type GithubSyncOutcome } from './runGithubSync';
import type { GithubStore } from './store/githubStore';
import { openGithubStore } from './store/openGithubStore';

/** A running sync without progress for this long, and not hibernating, is failed as stuck. */
export const GITHUB_STUCK_AFTER_MS = 30 * 60_000;

// GitHub's rules: an owner is letters, digits and inner hyphens; a name is letters, digits, `_.-`, not `.`/`..`.
const REPO = /^[A-Za-z0-9][A-Za-z0-9-]{0,38}\/(?!\.\.?$)[A-Za-z0-9_.-]{1,100}$/;

/** `owner/name` list from --repos or --repos-file (one a line, # comments); bad input changes nothing. */
export function parseRepos(list: string | undefined, file: string | undefined): string[] | null {
  if (list !== undefined && file !== undefined) throw usage('give --repos or --repos-file, not both');
  let items: string[];
  if (list !== undefined) items = list.split(',');
  else if (file !== undefined) {
    let text: string;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch (err) {
      throw usage(`--repos-file ${file}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
    }
    items = text.split('\n').map((l) => l.replace(/#.*/, ''));
  } else return null;
  const repos = [...new Set(items.map((s) => s.trim()).filter((s) => s !== ''))];
  const bad = repos.filter((r) => !REPO.test(r));
  if (bad.length > 0) throw usage(`not a repository (owner/name): ${bad.map((b) => JSON.stringify(b)).join(', ')}`);
  if (repos.length === 0) throw usage('no repositories given');
  return repos;
}

const usage = (message: string) => new ClientError(0, ExitCode.usage, message);

/** Registers `github sync` and `github status` (one line in runCli). */
export function registerGithubCommands(program: Command, setExitCode: (code: number) => void): void {
  const github = program.command('github').description('GitHub sync (ADR 0006): pull requests, workflow runs and jobs into the github schema');
  github.command('sync')
    .description('start a sync, or resume the hibernating one; with --wait, stay until it ends')
    .option('--repos <list>', 'owner/name,owner/name')
    .option('--repos-file <file>', 'one owner/name a line')
    .option('--wait', 'wake the sync at each wake-up time until it ends; exit 0 only when it completed everywhere')
    .option('--json', 'print the final status as JSON')
    .action(async (opts: { repos?: string; reposFile?: string; wait?: boolean; json?: boolean }) => {
      const repos = parseRepos(opts.repos, opts.reposFile);
      setExitCode(await withStore((store, logger) => syncCommand(store, logger, repos, opts.wait === true, opts.json === true)));
    });
  github.command('status')
    .description('the newest sync: stages, counters, hibernation and remaining quota')
    .option('--json', 'print JSON (GithubSyncStatus, see README)')
    .action(async (opts: { json?: boolean }) => {
      setExitCode(await withStore(async (store) => {
        const latest = await store.latestSync();
        const status = latest === null ? null : await githubSyncStatus(store, latest);
        process.stdout.write(opts.json === true ? `${JSON.stringify({ sync: status })}\n` : formatGithubStatus(status));
        return ExitCode.ok;
      }));
    });
}

async function withStore(fn: (store: GithubStore, logger: Logger) => Promise<number>): Promise<number> {
  const config = loadConfig();
  const logger = createLogger('quantilica-github', process.env.QUANTILICA_LOG_LEVEL ?? 'warn');
  const store = await openGithubStore({ databaseUrl: config.databaseUrl, homeDir: config.homeDir, logger });
  try {
    return await fn(store, logger);
  } finally {
    await store.db.close();
  }
}

async function syncCommand(store: GithubStore, logger: Logger, repos: string[] | null, wait: boolean, json: boolean): Promise<number> {
  await store.reconcileStuck(GITHUB_STUCK_AFTER_MS);
  const running = await store.latestSync(true);
  let resume: string | undefined;
  if (running !== null) {
    if (running.hibernatingUntil === null) {
      process.stderr.write(`github sync ${running.id} is already running\n`);
      return ExitCode.refused;
    }
    if (repos !== null) process.stderr.write(`github sync ${running.id} is hibernating; resuming it (--repos ignored)\n`);
    resume = running.id;
  } else if (repos === null) {
    throw usage('no running sync to resume: give --repos or --repos-file');
  }
  const controller = new AbortController();
  const onSignal = () => controller.abort(new Error('cancelled'));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const budgets = new BudgetTracker();
  const client = githubClientConfigFromEnv();
  try {
    let outcome: GithubSyncOutcome | null = null;
    for (;;) {
      if (resume !== undefined) {
        const row = (await store.getSync(resume))!;
        if (row.hibernatingUntil !== null && row.hibernatingUntil > Date.now()) {
          if (!wait) {
            process.stdout.write(`github sync ${row.id} hibernating until ${new Date(row.hibernatingUntil).toISOString()} (${row.budget ?? '?'} budget)\n`);
            return ExitCode.ok;
          }
          // The CLI is the scheduler here: one timer to the wake-up time; the sync itself holds nothing.
          if (!await wakeAt(row.hibernatingUntil, controller.signal)) return ExitCode.cancelled;
        }
      }
      outcome = await runGithubSync({ store, client, budgets, logger, signal: controller.signal, ...(resume !== undefined ? { resume } : { repos: repos! }) });
      if (outcome.kind !== 'hibernate') break;
      resume = outcome.syncId;
      process.stderr.write(`github sync ${outcome.syncId} hibernating until ${new Date(outcome.until).toISOString()} (${outcome.budget} budget, ${outcome.reason})\n`);
      if (!wait) {
        if (json) process.stdout.write(`${JSON.stringify({ sync: await githubSyncStatus(store, outcome.syncId) })}\n`);
        return ExitCode.ok;
      }
    }
    const status = outcome.syncId !== null ? await githubSyncStatus(store, outcome.syncId) : null;
    process.stdout.write(json ? `${JSON.stringify({ sync: status })}\n` : formatGithubStatus(status));
    if (outcome.kind === 'failed') return outcome.reason === 'cancelled' ? ExitCode.cancelled : 1;
    return notReachedAnywhere(outcome.summary) ? ExitCode.notReached : ExitCode.ok;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

export function notReachedAnywhere(s: GithubSyncStatus): boolean {
  return s.stages.changes.notReached > 0 || s.stages.checks.notReached > 0;
}

function wakeAt(until: number, signal: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => { signal.removeEventListener('abort', onAbort); resolve(true); }, Math.max(0, until - Date.now()));
    const onAbort = () => { clearTimeout(timer); resolve(false); };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
