import type { Command } from 'commander';
import { loadConfig } from '../config/config';
import { ExitCode } from '../exitCodes';
import { createLogger } from '../log/logger';
import { formatGithubStatus } from '../github/formatGithubStatus';
import { githubSyncCommand } from './githubSyncCommand';
import { githubSyncStatus } from '../github/githubSyncStatus';
import { parseRepos } from '../github/parseRepos';
import type { GithubStore } from '../github/store/githubStore';
import { openGithubStore } from '../github/store/openGithubStore';
import { checkSettingPaths, secureHome } from '../station/checkSettingPaths';

/** Registers `github sync` and `github status` (one line in runCli). */
export function registerGithubCommands(program: Command, setExitCode: (code: number) => void): void {
  const github = program.command('github').description('GitHub sync: pull requests, workflow runs and jobs into the github schema');
  github
    .command('sync')
    .description("run the catalog's github-sync entry in the agent (or follow its active run); with --wait, stay until it ends")
    .option('--repos <list>', "owner/name,owner/name (instead of the entry's)")
    .option('--repos-file <file>', 'one owner/name a line')
    .option('--entry <name>', 'the github-sync catalog entry, when there are several')
    .option('--full', 'a full load again: forget what earlier syncs kept of these repositories (cursors, ETags)')
    .option(
      '--wait',
      'stay until the sync ends, through its hibernations; exit 0 only when it completed everywhere, 82 when repositories were not reached',
    )
    .option('--json', 'print the run (and with --wait the final status) as JSON')
    .action(async (opts: { repos?: string; reposFile?: string; entry?: string; full?: boolean; wait?: boolean; json?: boolean }) => {
      const repos = parseRepos(opts.repos, opts.reposFile);
      setExitCode(
        await githubSyncCommand({ repos, entry: opts.entry, full: opts.full === true, wait: opts.wait === true, json: opts.json === true }),
      );
    });
  github
    .command('status')
    .description('the newest sync: stages, counters, hibernation and remaining quota')
    .option('--json', 'print JSON (GithubSyncStatus, see README)')
    .action(async (opts: { json?: boolean }) => {
      setExitCode(
        await withStore(async (store) => {
          const latest = await store.latestSync();
          const status = latest === null ? null : await githubSyncStatus(store, latest);
          process.stdout.write(opts.json === true ? `${JSON.stringify({ sync: status })}\n` : formatGithubStatus(status));
          return ExitCode.ok;
        }),
      );
    });
}

async function withStore(fn: (store: GithubStore) => Promise<number>): Promise<number> {
  const config = loadConfig();
  // Its SQLite store lives in the home: a home another account could plant files in is refused first.
  checkSettingPaths(config);
  secureHome(config.homeDir);
  const logger = createLogger('quantilica-github', process.env.QUANTILICA_LOG_LEVEL ?? 'warn');
  const store = await openGithubStore({ databaseUrl: config.databaseUrl, homeDir: config.homeDir, logger });
  try {
    return await fn(store);
  } finally {
    await store.db.close();
  }
}
