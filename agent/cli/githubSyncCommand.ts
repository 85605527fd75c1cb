import { isFinalStatus, type CatalogEntryInfo, type RunInfo } from '../../shared/protocol';
import { checkSettingPaths, secureHome } from '../station/checkSettingPaths';
import { startDetachedOwner } from './detachedRun';
import { openLink, openRemoteLink } from './openLink';
import { runExitCode } from './runExitCode';
import { waitWithCancelOnSignal } from './waitWithCancelOnSignal';
import { loadConfig, type Config } from '../config/config';
import { ClientError } from '../errors';
import { ExitCode } from '../exitCodes';
import { createLogger, type Logger } from '../log/logger';
import { formatGithubStatus } from '../github/formatGithubStatus';
import { githubApiConfigured, githubClientConfigFromEnv } from '../github/githubClient';
import { githubSyncStatus, type GithubSyncStatus } from '../github/githubSyncStatus';
import { openGithubStore } from '../github/store/openGithubStore';
import { StreamStore } from '../github/store/streamStore';

export interface GithubSyncOptions {
  /** The run's repositories (--repos, --repos-file), or null for its catalog entry's. */
  repos: string[] | null;
  /** The github-sync catalog entry; needed only when the catalog has several. */
  entry?: string;
  /** Forget the repositories' cursors and ETags first: the sync is a full load (`--full`). */
  full?: boolean;
  wait: boolean;
  json: boolean;
}

/**
 * `quantilica github sync`: a run of the catalog's github-sync entry, in the agent like any run
 * (`quantilica run <entry> -- owner/name…`), so the agent's slot, schedule, telemetry and hibernation
 * apply. Without an agent it does what `quantilica run` does: with --wait this process runs it
 * (through its hibernations); without, a detached owner process does (`run --detach`). A sync of the
 * entry already waiting, running or hibernating is followed, never doubled.
 */
export async function githubSyncCommand(opts: GithubSyncOptions): Promise<number> {
  const config = loadConfig();
  checkSettingPaths(config);
  secureHome(config.homeDir);
  const logger = createLogger('quantilica-cli', config.logLevel ?? 'warn', opts.json ? 'json' : config.logFormat);
  const remote = await openRemoteLink(config, logger);
  // Without an agent and without --wait a detached owner must hold the run; this process only looks.
  const holder = { link: remote ?? (await openLink(config, logger)) };
  let run: RunInfo;
  try {
    const { catalog, runs } = await holder.link.snapshot();
    const entry = pickEntry(catalog, opts.entry);
    // The first line says where the repositories are read from (the demo's simulator or a configured API).
    const api = entry.demo && !githubApiConfigured() ? "the demo's built-in GitHub simulator" : githubClientConfigFromEnv().baseUrl;
    process.stderr.write(`github sync: entry ${entry.name} against ${api}\n`);
    const active = runs.find((r) => r.fetcher === entry.name && !isFinalStatus(r.status));
    if (active !== undefined && (opts.repos !== null || opts.full === true)) {
      process.stderr.write(
        `github sync: run ${active.runId} of ${entry.name} is already ${describe(active)}; ${opts.full === true ? '--full' : '--repos'} applies to a new sync once it ends\n`,
      );
      return ExitCode.refused;
    }
    if (active === undefined && opts.full === true) await forgetStreams(config, logger, opts.repos);
    if (active !== undefined) {
      run = active;
      process.stderr.write(`github sync: following run ${run.runId} of ${entry.name}, ${describe(run)}\n`);
    } else if (!opts.wait && !holder.link.remote) {
      run = await startDetachedOwner(process.argv[1] ?? '', entry.name, opts.repos ?? []);
    } else {
      run = await holder.link.run(entry.name, opts.repos ?? []);
    }
    if (!opts.wait) {
      process.stdout.write(opts.json ? `${JSON.stringify({ run })}\n` : `run ${run.runId} ${run.fetcher} ${describe(run)}\n`);
      return ExitCode.ok;
    }
    if (active === undefined) process.stderr.write(`run ${run.runId} ${run.fetcher} queued in ${run.pool}\n`);
    run = await waitWithCancelOnSignal(holder, run.runId, config, logger);
  } finally {
    await holder.link.close();
  }
  const sync = await finalStatus(config, logger, run.runId);
  process.stdout.write(
    opts.json
      ? `${JSON.stringify({ run, sync })}\n`
      : `run ${run.runId} ${run.status}${run.reason ? ` (${run.reason})` : ''}\n${formatGithubStatus(sync)}`,
  );
  // A failed sync (storage, stuck) is 1, not the fetchers' "refused" (81): it did start.
  return run.status === 'failed' && run.startedAt !== null ? 1 : runExitCode(run);
}

function pickEntry(catalog: CatalogEntryInfo[], name: string | undefined): CatalogEntryInfo {
  const syncs = catalog.filter((e) => e.kind === 'github-sync');
  if (name !== undefined) {
    const entry = syncs.find((e) => e.name === name || e.aliases.includes(name));
    if (entry === undefined)
      throw new ClientError(
        0,
        ExitCode.unknownName,
        `${name} is not a github-sync entry of the catalog; those are: ${syncs.map((e) => e.name).join(', ') || 'none'}`,
      );
    return entry;
  }
  if (syncs.length === 1) return syncs[0];
  if (syncs.length === 0)
    throw new ClientError(0, ExitCode.unknownName, 'the catalog has no github-sync entry (see the README, "A sync as a catalog entry")');
  throw new ClientError(
    0,
    ExitCode.usage,
    `the catalog has several github-sync entries; give --entry: ${syncs.map((e) => e.name).join(', ')}`,
  );
}

function describe(run: RunInfo): string {
  if (run.wait?.kind === 'hibernating') return `hibernating until ${run.wait.until}`;
  if (run.wait?.kind === 'storage') return `waiting for its storage (${run.wait.cause}) since ${run.wait.since}`;
  if (run.status === 'waiting') return `queued in ${run.pool}`;
  return run.status;
}

/** `--full`: what outlives a sync (cursors, ETags) forgotten for these repositories (null: every one). */
async function forgetStreams(config: Config, logger: Logger, repos: string[] | null): Promise<void> {
  const store = await openGithubStore({ databaseUrl: config.databaseUrl, homeDir: config.homeDir, logger });
  try {
    await new StreamStore(store.db).forget(repos);
  } finally {
    await store.db.close();
  }
  process.stderr.write(
    `github sync: --full: ${repos === null ? 'every repository' : `${repos.length} repositories`} loaded in full again\n`,
  );
}

/** The sync's own figures (counters, stages, reasons) for the run that ended. */
async function finalStatus(config: Config, logger: Logger, runId: string): Promise<GithubSyncStatus | null> {
  const store = await openGithubStore({ databaseUrl: config.databaseUrl, homeDir: config.homeDir, logger });
  try {
    const row = await store.syncOfRun(runId);
    return row === null ? null : await githubSyncStatus(store, row);
  } finally {
    await store.db.close();
  }
}
