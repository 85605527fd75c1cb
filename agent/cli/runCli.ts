import { Command, CommanderError, Option } from 'commander';
import { demoFetch } from '../catalog/demoFetch';
import { loadConfig, type Config } from '../config/config';
import { ConfigError } from '../config/configError';
import { ClientError, EnvironmentError } from '../errors';
import { ExitCode } from '../exitCodes';
import type { RunStatus } from '../../shared/protocol';
import { createLogger } from '../log/logger';
import type { FlushResult } from '../server/agentControl';
import { emitFromCli, flushFromCli, type TelemetryEmitOptions } from '../telemetry/emitCommand';
import { Spool } from '../telemetry/spool';
import type { AgentLink } from './agentLink';
import { agentCommand } from './agentCommand';
import { registerCompletionCommands } from './completionCommand';
import { registerLogsCommand } from './logsCommand';
import { registerServiceCommand } from './serviceCommand';
import { filterRuns, formatRunsTable, parseSince, parseStatus, useColour } from './runsView';
import { formatScheduleTable, progressBar } from './scheduleTable';
import { formatSlots, formatStatus } from './format';
import { openLink, openRemoteLink } from './openLink';

const RUN_ID = /^[0-9a-z]{6,12}-[0-9a-f]{8}$/;

/** Parses argv, runs one command and returns the process exit code (documented in the README). */
export async function runCli(argv: string[]): Promise<number> {
  let exitCode: number = ExitCode.ok;
  const program = new Command('quantilica')
    .description("Quantilica collection orchestrator: pools of slots, disk backpressure, schedule, telemetry")
    .exitOverride()
    .configureOutput({ writeErr: (s) => process.stderr.write(s) });

  const withLink = async <T>(fn: (link: AgentLink, config: Config) => Promise<T>): Promise<T> => {
    const config = loadConfig();
    const logger = createLogger('quantilica-cli', process.env.QUANTILICA_LOG_LEVEL ?? 'warn');
    const link = await openLink(config, logger);
    try {
      return await fn(link, config);
    } finally {
      await link.close();
    }
  };

  program.command('agent')
    .description('run the agent in the foreground (what `npm start` runs)')
    .option('--stop-fetchers-on-exit', 'cancel running fetchers when the agent gets SIGTERM or SIGINT')
    .action(async (opts: { stopFetchersOnExit?: boolean }) => {
      exitCode = await agentCommand(loadConfig(), opts.stopFetchersOnExit === true);
    });

  program.command('run')
    .description('run a catalog fetcher; waits for it and exits with its exit code unless --detach')
    .argument('<fetcher>', 'catalog name or alias')
    .argument('[args...]', 'extra arguments for the fetcher, after --')
    .option('--detach', 'print the run id and return at once')
    .option('--json', 'print the run as JSON')
    .action(async (fetcher: string, args: string[], opts: { detach?: boolean; json?: boolean }) => {
      exitCode = await withLink(async (link) => {
        const run = await link.run(fetcher, args);
        if (!opts.json) process.stdout.write(`run ${run.runId} ${run.fetcher} queued in ${run.pool}\n`);
        if (opts.detach) {
          if (opts.json) process.stdout.write(`${JSON.stringify(run)}\n`);
          return ExitCode.ok;
        }
        const onSignal = () => { void link.cancel({ runId: run.runId }); };
        process.once('SIGINT', onSignal);
        process.once('SIGTERM', onSignal);
        const done = await link.waitRun(run.runId);
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
        process.stdout.write(opts.json ? `${JSON.stringify(done)}\n` : `run ${done.runId} ${done.status}${done.exitCode !== null ? ` exit ${done.exitCode}` : ''}${done.reason ? ` (${done.reason})` : ''}\n`);
        return exitCodeOf(done);
      });
    });

  program.command('cancel')
    .description('cancel a run by id, or every active run of a fetcher')
    .argument('<target>', 'run id or fetcher name')
    .option('--no-wait', 'return once the cancel is sent')
    .action(async (target: string, opts: { wait: boolean }) => {
      exitCode = await withLink(async (link) => {
        const runs = await link.cancel(RUN_ID.test(target) ? { runId: target } : { fetcher: target });
        if (runs.length === 0) {
          process.stderr.write(`no active run of ${target}\n`);
          return ExitCode.unknownName;
        }
        for (const run of runs) {
          const done = opts.wait ? await link.waitRun(run.runId) : run;
          process.stdout.write(`run ${done.runId} ${done.fetcher} ${done.status}\n`);
        }
        return ExitCode.ok;
      });
    });

  const jsonOption = () => new Option('--json', 'print JSON (stable shape, see README)');
  program.command('status').description('pools, runs, disk gate, spool and schedule').addOption(jsonOption())
    .action(async (opts: { json?: boolean }) => {
      exitCode = await withLink(async (link) => {
        const snapshot = await link.snapshot();
        process.stdout.write(opts.json ? `${JSON.stringify(snapshot)}\n` : formatStatus(snapshot, link.remote));
        return ExitCode.ok;
      });
    });
  program.command('slots').description('who holds which slot (the runbook\'s fuser view)').addOption(jsonOption())
    .action(async (opts: { json?: boolean }) => {
      exitCode = await withLink(async (link) => {
        const { pools } = await link.snapshot();
        process.stdout.write(opts.json ? `${JSON.stringify({ pools })}\n` : formatSlots(pools));
        return ExitCode.ok;
      });
    });
  program.command('runs').description('recent runs, newest first').addOption(jsonOption())
    .option('--limit <n>', 'how many', (v) => parseLimit(v), 20)
    .option('--fetcher <name>', 'only this fetcher')
    .option('--status <status>', 'only runs in this state (waiting, running, completed, failed, cancelled, skipped)', parseStatus)
    .option('--since <when>', 'only runs started since: 30min, 2h, 3d, or a date')
    .action(async (opts: { json?: boolean; limit: number; fetcher?: string; status?: RunStatus; since?: string }) => {
      const since = opts.since === undefined ? undefined : parseSince(opts.since);
      exitCode = await withLink(async (link) => {
        const filtered = opts.fetcher !== undefined || opts.status !== undefined || since !== undefined;
        const runs = filterRuns(await link.listRuns(filtered ? 1000 : opts.limit), { fetcher: opts.fetcher, status: opts.status, since }).slice(0, opts.limit);
        process.stdout.write(opts.json ? `${JSON.stringify({ runs })}\n` : formatRunsTable(runs, useColour()));
        return ExitCode.ok;
      });
    });

  const schedule = program.command('schedule').description('next due time per fetcher; pause and resume').addOption(jsonOption())
    .action(async (opts: { json?: boolean }) => {
      exitCode = await withLink(async (link) => {
        const { schedule: status } = await link.snapshot();
        process.stdout.write(opts.json ? `${JSON.stringify({ schedule: status })}\n` : formatScheduleTable(status));
        return ExitCode.ok;
      });
    });
  for (const paused of [true, false]) {
    schedule.command(paused ? 'pause' : 'resume')
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
  const flushAction = async () => {
    const config = loadConfig();
    const logger = createLogger('quantilica-cli', process.env.QUANTILICA_LOG_LEVEL ?? 'warn');
    // On a terminal a bar redrawn in place; otherwise (cron, pipes) one line per report.
    const tty = process.stderr.isTTY === true;
    const progress = (sent: number, remaining: number) => process.stderr.write(tty ? `\rflush ${progressBar(sent, remaining)}` : `flush: ${sent} sent, ${remaining} remaining\n`);
    const link = await openRemoteLink(config);
    let result: FlushResult;
    try {
      result = link ? await link.flush(progress) : await flushFromCli(config, logger, progress);
    } finally {
      await link?.close();
    }
    if (tty) process.stderr.write('\n');
    process.stdout.write(`flush: ${result.sent} sent, ${result.remaining} remaining${result.error ? `; error: ${result.error}` : ''}\n`);
    exitCode = result.error ? ExitCode.agentUnavailable : ExitCode.ok;
  };
  program.command('flush').description('send spooled telemetry to PostgreSQL now (the seed\'s --flush)').action(flushAction);
  const telemetry = program.command('telemetry').description('run telemetry: emit events from scripts, flush the spool');
  telemetry.command('flush').description('send spooled telemetry to PostgreSQL now').action(flushAction);
  telemetry.command('emit')
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
      const config = loadConfig();
      const spool = new Spool({ path: config.telemetrySpool, logger: createLogger('quantilica-cli', 'warn') });
      try {
        const result = emitFromCli(event, opts, spool);
        (result.ok ? process.stdout : process.stderr).write(`${result.message}\n`);
        exitCode = result.ok ? ExitCode.ok : result.exitCode === 2 ? ExitCode.usage : 1;
      } finally {
        spool.close();
      }
    });

  registerLogsCommand(program, (code) => { exitCode = code; });
  registerCompletionCommands(program);
  registerServiceCommand(program, (code) => { exitCode = code; });

  program.command('demo-fetch', { hidden: true })
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

function exitCodeOf(run: { status: string; exitCode: number | null; reason: string | null }): number {
  if (run.status === 'completed') return ExitCode.ok;
  if (run.status === 'cancelled') return ExitCode.cancelled;
  if (run.reason === 'wait-timeout' || run.reason === 'disk-backpressure-timeout') return ExitCode.waitTimeout;
  if (run.exitCode !== null && run.exitCode !== 0) return run.exitCode;
  return ExitCode.refused;
}

function parseLimit(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 10000) throw new ClientError(0, ExitCode.usage, `--limit ${value}: allowed: a whole number from 1 to 10000`);
  return n;
}

function reportError(err: unknown): number {
  if (err instanceof CommanderError) {
    // Help and version are "errors" to commander; they already printed what they had to.
    if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version' || err.code === 'commander.help') return ExitCode.ok;
    return ExitCode.usage;
  }
  const message = err instanceof Error ? err.message : String(err);
  process.stderr.write(`quantilica: ${message}\n`);
  if (err instanceof ConfigError) return ExitCode.config;
  if (err instanceof EnvironmentError) return err.exitCode;
  if (err instanceof ClientError) return err.exitCode;
  return 1;
}
