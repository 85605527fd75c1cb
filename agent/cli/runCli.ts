import * as fs from 'node:fs';
import { Command, CommanderError, Option } from 'commander';
import { demoFetch } from '../catalog/demoFetch';
import { loadConfig, type Config } from '../config/config';
import { ConfigError } from '../config/configError';
import { ClientError, EnvironmentError } from '../errors';
import { ExitCode } from '../exitCodes';
import { createLogger, type Logger } from '../log/logger';
import { redactCredentials } from '../config/redact';
import type { RunInfo, RunStatus } from '../../shared/protocol';
import type { FlushResult } from '../server/agentControl';
import { registerGithubCommands } from './githubCommand'; // the GitHub sync
import { emitFromCli, flushFromCli, type TelemetryEmitOptions } from '../telemetry/emitCommand';
import { Spool } from '../telemetry/spool';
import type { AgentLink } from './agentLink';
import { agentCommand } from './agentCommand';
import { registerCompletionCommands } from './completionCommand';
import { registerLogsCommand } from './logsCommand';
import { registerOperatorCommands } from './operatorCommands';
import { registerServiceCommand } from './serviceCommand';
import { filterRuns, formatRunsTable, parseSince, parseStatus, useColour } from './runsView';
import { formatScheduleTable, progressBar } from './scheduleTable';
import { formatSlots, formatStatus } from './format';
import { openLink, openLiveAgentLink, openRemoteLink } from './openLink';
import { checkSettingPaths, secureHome } from '../station/checkSettingPaths';
import { startDetachedOwner, type OwnerReport } from './detachedRun';
import type { LinkHolder } from './followRun';
import { runExitCode } from './runExitCode';
import { waitWithCancelOnSignal } from './waitWithCancelOnSignal';
import { cliVersion } from '../cliVersion';
import { cancelCommand } from './cancelCommand';
import { makeStrict } from './strictCommands';
import { ConnectionFileError } from '../../shared/node/connectionFile';

/** Parses argv, runs one command and returns the process exit code (documented in the README). */
export async function runCli(argv: string[]): Promise<number> {
  let exitCode: number = ExitCode.ok;
  const program = makeStrict(new Command('quantilica').exitOverride())
    .description('Quantilica collection orchestrator: pools of slots, disk backpressure, schedule, telemetry')
    .version(cliVersion(), '--version', 'print the version')
    // Commander leaves `help <command>` out of a program that also acts alone (--flush).
    .helpCommand('help [command]', 'the help of a command')
    // The operations standard's own argument (`cron_fetch.sh --flush`); the same as `quantilica flush`.
    .option('--flush', 'send spooled telemetry to PostgreSQL now (same as `quantilica flush`)')
    .action(async (opts: { flush?: boolean }) => {
      if (opts.flush) await flushAction();
      else program.help({ error: true });
    });

  const withLink = async <T>(fn: (link: AgentLink, config: Config, logger: Logger) => Promise<T>, json = false): Promise<T> => {
    const { config, logger } = prepare(json);
    const link = await openLink(config, logger);
    try {
      return await fn(link, config, logger);
    } finally {
      await link.close();
    }
  };

  program
    .command('agent')
    .description('run the agent in the foreground (what `npm start` runs)')
    .option('--stop-fetchers-on-exit', 'cancel running fetchers when the agent gets SIGTERM or SIGINT')
    .option('--cancel-waiting-on-exit', 'cancel waiting runs when the agent stops (by default the next agent resumes them)')
    .action(async (opts: { stopFetchersOnExit?: boolean; cancelWaitingOnExit?: boolean }) => {
      const config = loadConfig();
      checkSettingPaths(config);
      exitCode = await agentCommand(config, opts.stopFetchersOnExit === true, opts.cancelWaitingOnExit === true);
    });

  program
    .command('run')
    .description('run a catalog fetcher; waits for it and exits with its exit code unless --detach')
    .argument('<fetcher>', 'catalog name or alias')
    .argument('[args...]', 'extra arguments for the fetcher, after -- (if its catalog entry allows them)')
    .option('--detach', 'print the run id and return at once (without an agent, a detached process owns the run)')
    .option('--json', 'print the run as JSON')
    .action(async (fetcher: string, args: string[], opts: { detach?: boolean; json?: boolean }) => {
      const { config, logger } = prepare(opts.json === true);
      const queued = (run: RunInfo) => {
        if (!opts.json) process.stdout.write(`run ${run.runId} ${run.fetcher} queued in ${run.pool}\n`);
      };
      if (opts.detach) {
        const remote = await openLiveAgentLink(config, logger);
        try {
          const run = remote ? await remote.run(fetcher, args) : await startDetachedOwner(process.argv[1] ?? '', fetcher, args);
          queued(run);
          if (opts.json) process.stdout.write(`${JSON.stringify(run)}\n`);
        } finally {
          await remote?.close();
        }
        exitCode = ExitCode.ok;
        return;
      }
      const holder: LinkHolder = { link: await openLink(config, logger) };
      try {
        const run = await holder.link.run(fetcher, args);
        queued(run);
        const done = await waitWithCancelOnSignal(holder, run.runId, config, logger);
        process.stdout.write(
          opts.json
            ? `${JSON.stringify(done)}\n`
            : `run ${done.runId} ${done.status}${done.exitCode !== null ? ` exit ${done.exitCode}` : ''}${done.reason ? ` (${done.reason})` : ''}\n`,
        );
        exitCode = runExitCode(done);
      } finally {
        await holder.link.close();
      }
    });

  // The process `run --detach` starts when no agent runs: it owns the run until the run ends.
  program
    .command('run-owner', { hidden: true })
    .argument('<fetcher>')
    .argument('[args...]')
    .action(async (fetcher: string, args: string[]) => {
      const { config, logger } = prepare(true);
      const report = (value: OwnerReport) => {
        try {
          fs.writeSync(3, JSON.stringify(value));
          fs.closeSync(3);
        } catch {
          // The command that started us is gone; the run goes on regardless.
        }
      };
      let holder: LinkHolder;
      let run: RunInfo;
      try {
        holder = { link: await openLink(config, logger) };
        run = await holder.link.run(fetcher, args);
      } catch (err) {
        const code = err instanceof ClientError ? err.code : 0;
        exitCode = errorExitCode(err);
        report({ error: err instanceof Error ? err.message : String(err), exitCode, code });
        return;
      }
      report({ run });
      try {
        if (!holder.link.remote) exitCode = runExitCode(await waitWithCancelOnSignal(holder, run.runId, config, logger));
      } finally {
        await holder.link.close();
      }
    });

  program
    .command('cancel')
    .description('cancel a run by id, or every active run of a fetcher')
    .argument('[target]', 'run id or fetcher name (a run id is tried first)')
    .option('--run <id>', 'the run id (no guessing)')
    .option('--fetcher <name>', 'every active run of this fetcher (no guessing)')
    .option('--no-wait', 'return once the cancel is sent')
    .action(async (target: string | undefined, opts: { wait: boolean; run?: string; fetcher?: string }) => {
      const given = [target, opts.run, opts.fetcher].filter((v) => v !== undefined);
      if (given.length !== 1)
        throw new ClientError(0, ExitCode.usage, 'cancel needs exactly one of: a run id or fetcher name, --run <id>, --fetcher <name>');
      exitCode = await withLink((link, config, logger) =>
        cancelCommand({ link }, { target, runId: opts.run, fetcher: opts.fetcher, wait: opts.wait }, config, logger),
      );
    });

  const jsonOption = () => new Option('--json', 'print JSON (stable shape, see README)');
  program
    .command('status')
    .description('pools, runs, disk gate, spool and schedule')
    .addOption(jsonOption())
    .action(async (opts: { json?: boolean }) => {
      exitCode = await withLink(async (link) => {
        const snapshot = await link.snapshot();
        process.stdout.write(opts.json ? `${JSON.stringify(snapshot)}\n` : formatStatus(snapshot, link.remote));
        return ExitCode.ok;
      });
    });
  program
    .command('slots')
    .description('who holds which slot (what `fuser` on the lock files would say)')
    .addOption(jsonOption())
    .action(async (opts: { json?: boolean }) => {
      exitCode = await withLink(async (link) => {
        const { pools } = await link.snapshot();
        process.stdout.write(opts.json ? `${JSON.stringify({ pools })}\n` : formatSlots(pools));
        return ExitCode.ok;
      });
    });
  program
    .command('runs')
    .description('recent runs, newest first')
    .addOption(jsonOption())
    .option('--limit <n>', 'how many', (v) => parseLimit(v), 20)
    .option('--fetcher <name>', 'only this fetcher')
    .option('--status <status>', 'only runs in this state (waiting, running, completed, failed, cancelled, skipped)', parseStatus)
    .option('--since <when>', 'only runs started since: 30min, 2h, 3d, or a date')
    .action(async (opts: { json?: boolean; limit: number; fetcher?: string; status?: RunStatus; since?: string }) => {
      const since = opts.since === undefined ? undefined : parseSince(opts.since);
      exitCode = await withLink(async (link) => {
        const filtered = opts.fetcher !== undefined || opts.status !== undefined || since !== undefined;
        const runs = filterRuns(await link.listRuns(filtered ? 1000 : opts.limit), {
          fetcher: opts.fetcher,
          status: opts.status,
          since,
        }).slice(0, opts.limit);
        process.stdout.write(opts.json ? `${JSON.stringify({ runs })}\n` : formatRunsTable(runs, useColour()));
        return ExitCode.ok;
      });
    });

  const schedule = program
    .command('schedule')
    .description('next due time per fetcher; pause and resume')
    .addOption(jsonOption())
    .action(async (opts: { json?: boolean }) => {
      exitCode = await withLink(async (link) => {
        const { schedule: status } = await link.snapshot();
        process.stdout.write(opts.json ? `${JSON.stringify({ schedule: status })}\n` : formatScheduleTable(status));
        return ExitCode.ok;
      });
    });
  for (const paused of [true, false]) {
    schedule
      .command(paused ? 'pause' : 'resume')
      .description(`${paused ? 'pause' : 'resume'} the schedule of one fetcher, or the whole schedule`)
      .argument('[fetcher]', 'catalog name; none for the whole schedule')
      .action(async (fetcher: string | undefined) => {
        exitCode = await withLink(async (link) => {
          const status = await link.setSchedulePaused(paused, fetcher);
          process.stdout.write(formatScheduleTable(status));
          return ExitCode.ok;
        });
      });
  }

  // A flush needs only the spool: without an agent it opens the spool itself rather than a whole
  // in-process orchestrator (which would also adopt runs and start the disk gate).
  async function flushAction(): Promise<void> {
    const { config, logger } = prepare(false);
    // Progress is for a person watching: one line rewritten in place on a terminal, nothing otherwise;
    // the result is printed once, on stdout.
    const progress = (sent: number, remaining: number) => {
      if (process.stderr.isTTY) process.stderr.write(`\rflush ${progressBar(sent, remaining)}`);
    };
    const link = await openRemoteLink(config, logger);
    let result: FlushResult;
    try {
      result = link ? await link.flush(progress) : await flushFromCli(config, logger, progress);
    } finally {
      await link?.close();
    }
    if (process.stderr.isTTY) process.stderr.write('\r\x1b[K');
    process.stdout.write(
      `flush: ${result.sent} sent, ${result.remaining} remaining${result.error ? `; error: ${redactCredentials(result.error)}` : ''}\n`,
    );
    exitCode = result.error ? ExitCode.agentUnavailable : ExitCode.ok;
  }
  program.command('flush').description('send spooled telemetry to PostgreSQL now (the same as `quantilica --flush`)').action(flushAction);
  const telemetry = program.command('telemetry').description('run telemetry: emit events from scripts, flush the spool');
  telemetry.command('flush').description('send spooled telemetry to PostgreSQL now').action(flushAction);
  telemetry
    .command('emit')
    .description('record a start, heartbeat or finish event through the spool (for scripts outside the agent)')
    .argument('<event>', 'start | heartbeat | finish')
    .option('--run-id <id>', 'the run (start makes one when absent and prints it)')
    .option('--task <name>', 'the fetcher or task name')
    .option('--pool <pool>', 'the pool')
    .option('--status <status>', 'finish: completed | failed | cancelled')
    .option('--exit-code <n>', 'finish: the exit code')
    .option('--signal <name>', 'finish: the signal that ended it')
    .option('--reason <text>', 'finish: why it failed or was cancelled')
    .option('--duration <seconds>', 'finish: duration in seconds')
    .option('--at <iso-time>', 'when it happened (default now)')
    .action((event: string, opts: TelemetryEmitOptions) => {
      const { config, logger } = prepare(false);
      const spool = new Spool({ path: config.telemetrySpool, logger });
      try {
        const result = emitFromCli(event, opts, spool);
        if (result.ok) process.stdout.write(`${result.message}\n`);
        else process.stderr.write(`quantilica: ${result.message}\n`);
        exitCode = result.ok ? ExitCode.ok : result.exitCode === 2 ? ExitCode.usage : 1;
      } finally {
        spool.close();
      }
    });

  registerGithubCommands(program, (code) => {
    exitCode = code;
  }); // the GitHub sync
  registerLogsCommand(program, (code) => {
    exitCode = code;
  });
  registerOperatorCommands(
    program,
    {
      remote: (json) => {
        const { config, logger } = prepare(json);
        return openRemoteLink(config, logger);
      },
      any: (json) => {
        const { config, logger } = prepare(json);
        return openLink(config, logger);
      },
    },
    (code) => {
      exitCode = code;
    },
  );
  registerCompletionCommands(program);
  registerServiceCommand(program, (code) => {
    exitCode = code;
  });

  program
    .command('demo-fetch', { hidden: true })
    .argument('<name>')
    .option('--seconds <s>', 'duration', Number, 30)
    .option('--rate-mb <mb>', 'MB per second', Number, 1)
    .action(async (name: string, opts: { seconds: number; rateMb: number }) => {
      exitCode = await demoFetch(name, opts.seconds, opts.rateMb, process.env.DATA_DIR ?? process.cwd());
    });

  try {
    await program.parseAsync(argv, { from: 'user' });
  } catch (err) {
    return reportError(err);
  }
  return exitCode;
}

/**
 * What every command does first: the settings, checked (exit 78 or 73 naming the setting), a private
 * QUANTILICA_HOME, and the CLI's log: human lines on a terminal, JSON lines with --json, when stderr
 * is not a terminal, or with QUANTILICA_LOG_FORMAT=json.
 */
function prepare(json: boolean): { config: Config; logger: Logger } {
  const config = loadConfig();
  checkSettingPaths(config);
  secureHome(config.homeDir);
  const logger = createLogger('quantilica-cli', config.logLevel ?? 'warn', json ? 'json' : config.logFormat);
  return { config, logger };
}

function parseLimit(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 10000)
    throw new ClientError(0, ExitCode.usage, `--limit ${value}: allowed: a whole number from 1 to 10000`);
  return n;
}

function reportError(err: unknown): number {
  if (err instanceof CommanderError) {
    // Help and version are "errors" to commander; they already printed what they had to. Help shown
    // because a command is incomplete (`quantilica telemetry`) is a usage error.
    if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version') return ExitCode.ok;
    if (err.code === 'commander.help') return err.exitCode === 0 ? ExitCode.ok : ExitCode.usage;
    return ExitCode.usage;
  }
  const message = err instanceof Error ? err.message : String(err);
  process.stderr.write(`quantilica: ${redactCredentials(message)}\n`);
  return errorExitCode(err);
}

function errorExitCode(err: unknown): number {
  if (err instanceof ConfigError) return ExitCode.config;
  if (err instanceof EnvironmentError) return err.exitCode;
  if (err instanceof ClientError) return err.exitCode;
  // A connection file that cannot be trusted: no agent can be used, and working in-process beside
  // it would hide the tampering.
  if (err instanceof ConnectionFileError) return ExitCode.agentUnavailable;
  return 1;
}
