import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Command } from 'commander';
import { isFinalStatus, type LogChunk, type RunInfo } from '../../shared/protocol';
import { connectAgent, type AgentClient } from '../client/agentClient';
import { loadConfig, type Config } from '../config/config';
import { ClientError } from '../errors';
import { ExitCode } from '../exitCodes';
import { createLogger } from '../log/logger';
import { Spool } from '../telemetry/spool';
import { RunStore, toRunInfo } from '../runs/runStore';
import { ConnectionFileError, readConnectionFile } from '../../shared/node/connectionFile';
import { MAX_CHUNK_BYTES, readLogBytes } from '../server/logFollow';
import { readProcInfo } from '../../shared/node/procInfo';

const RUN_ID = /^[0-9a-z]{6,12}-[0-9a-f]{8}$/;
const POLL_MS = 250;
/** How far back `--lines` looks for line starts; a log line longer than this is cut. */
const TAIL_WINDOW = 1024 * 1024;

/** Where the logs come from: the running agent over the protocol, or the files themselves. */
interface LogSource {
  runs(): Promise<RunInfo[]>;
  read(runId: string, offset: number, waitMs: number): Promise<LogChunk>;
  close(): Promise<void>;
}

/**
 * `quantilica logs <run-id | fetcher> [--follow] [--lines N]`, like `journalctl -f`: the last lines
 * of a run's log (a fetcher name means its newest run), then, with --follow, what it prints until the
 * run ends. Works with the agent (protocol, `quantilica/readLog`) and without one (the run store and
 * the log file, read-only).
 */
/** Runs a fetcher name is looked up among when no agent answers (its newest run is the one shown). */
const LOCAL_RECENT_RUNS = 1000;

export function registerLogsCommand(program: Command, setExit: (code: number) => void): void {
  program
    .command('logs')
    .description("a run's log; with --follow, what it prints until it ends (like journalctl -f)")
    .argument('<target>', 'run id, or a fetcher name for its newest run')
    .option('-f, --follow', 'keep printing what the run writes until it ends')
    .option('-n, --lines <n>', 'start with the last N lines (0 prints only new output)', parseLines, 10)
    .action(async (target: string, opts: { follow?: boolean; lines: number }) => {
      const config = loadConfig();
      const source = await openSource(config);
      const stop = new AbortController();
      const onSignal = () => stop.abort();
      process.once('SIGINT', onSignal);
      process.once('SIGTERM', onSignal);
      try {
        setExit(await printLog(source, target, opts.follow === true, opts.lines, stop.signal));
      } finally {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
        await source.close();
      }
    });
}

async function printLog(source: LogSource, target: string, follow: boolean, lines: number, stop: AbortSignal): Promise<number> {
  const run = pickRun(await source.runs(), target);
  if (!run) throw new ClientError(0, ExitCode.unknownName, `no run ${RUN_ID.test(target) ? target : `of ${target}`} is known`);
  process.stderr.write(`-- ${run.fetcher} · run ${run.runId} · ${run.status}${run.logPath ? ` · ${run.logPath}` : ''} --\n`);
  // The starting point: the last `lines` lines of what is there now.
  const now = await endOf(source, run.runId, await source.read(run.runId, 0, 0));
  if (lines > 0) process.stdout.write(lastLines(now.tail, lines));
  let offset = now.end;
  let chunk = now.last;
  while (follow && !chunk.ended && !stop.aborted) {
    chunk = await source.read(run.runId, offset, 5000);
    if (chunk.text) process.stdout.write(chunk.text);
    offset = chunk.nextOffset;
  }
  if (follow && chunk.ended) process.stderr.write(`-- ${run.fetcher} · run ${run.runId} ${chunk.status} --\n`);
  return ExitCode.ok;
}

/** Reads to the current end, keeping only the last TAIL_WINDOW characters for `--lines`. */
async function endOf(source: LogSource, runId: string, first: LogChunk): Promise<{ end: number; tail: string; last: LogChunk }> {
  let tail = first.text;
  let last = first;
  while (last.text.length > 0) {
    const next = await source.read(runId, last.nextOffset, 0);
    if (next.text.length === 0) {
      last = next;
      break;
    }
    tail = (tail + next.text).slice(-TAIL_WINDOW);
    last = next;
  }
  return { end: last.nextOffset, tail, last };
}

function lastLines(text: string, n: number): string {
  if (text === '') return '';
  const lines = text.split('\n');
  const trailing = lines.at(-1) === '' ? lines.pop() : undefined;
  const out = lines.slice(-n).join('\n');
  return trailing === undefined ? out : `${out}\n`;
}

/** A run id, or the newest run of a fetcher (an active one first). */
function pickRun(runs: RunInfo[], target: string): RunInfo | undefined {
  if (RUN_ID.test(target)) return runs.find((r) => r.runId === target);
  const mine = runs
    .filter((r) => r.fetcher === target)
    .sort((a, b) => (b.startedAt ?? b.enqueuedAt).localeCompare(a.startedAt ?? a.enqueuedAt));
  return mine.find((r) => r.status === 'running') ?? mine.find((r) => r.logPath !== null) ?? mine[0];
}

async function openSource(config: Config): Promise<LogSource> {
  let pid: number | null = null;
  try {
    pid = (await readConnectionFile(config.connectionFile)).pid;
  } catch (err) {
    if (!(err instanceof ConnectionFileError && err.reason === 'missing')) throw err;
  }
  if (pid !== null && readProcInfo(pid)) return remoteSource(await connectAgent(config.connectionFile, { client: 'quantilica-cli logs' }));
  return localSource(config);
}

function remoteSource(client: AgentClient): LogSource {
  return {
    runs: () => client.listRuns(1000),
    read: (runId, offset, waitMs) => client.readLog({ runId, offset, waitMs }),
    close: () => client.close(),
  };
}

/** No agent: the run store for where the log is and whether the run ended, the file for the bytes. */
function localSource(config: Config): LogSource {
  // The run store lives in the spool's database (a state.db of an earlier version is moved in).
  const legacy = path.join(config.homeDir, 'state.db');
  if (!fs.existsSync(config.telemetrySpool) && !fs.existsSync(legacy)) {
    throw new ClientError(0, ExitCode.unknownName, `no run has been recorded on this station (${config.telemetrySpool} does not exist)`);
  }
  const logger = createLogger('quantilica-cli', 'warn');
  const spool = new Spool({ path: config.telemetrySpool, logger });
  const store = new RunStore(spool, legacy, logger);
  const find = (runId: string): RunInfo => {
    const stored = store.get(runId);
    if (!stored) throw new ClientError(0, ExitCode.unknownName, `no run ${runId}`);
    return toRunInfo(stored);
  };
  return {
    runs: () => Promise.resolve(store.recent(LOCAL_RECENT_RUNS).map(toRunInfo)),
    read: async (runId, offset, waitMs) => {
      const deadline = Date.now() + waitMs;
      for (;;) {
        const run = find(runId);
        const ended = isFinalStatus(run.status);
        const base = { runId, fetcher: run.fetcher, status: run.status };
        const read =
          run.logPath && fs.existsSync(run.logPath)
            ? readLogBytes(run.logPath, offset, MAX_CHUNK_BYTES)
            : { text: '', nextOffset: offset, size: offset };
        if (read.text.length > 0 || ended || Date.now() >= deadline) {
          return {
            ...base,
            offset: read.nextOffset - Buffer.byteLength(read.text),
            nextOffset: read.nextOffset,
            text: read.text,
            ended: ended && read.nextOffset >= read.size,
          };
        }
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      }
    },
    close: () => {
      spool.close();
      return Promise.resolve();
    },
  };
}

function parseLines(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 100_000)
    throw new ClientError(0, ExitCode.usage, `--lines ${value}: allowed: a whole number from 0 to 100000`);
  return n;
}
