import type { Command } from 'commander';
import type { NumberedOperatorEvent } from '../../shared/protocol';
import { ClientError } from '../errors';
import { ExitCode } from '../exitCodes';
import type { AgentLink } from './agentLink';

/** How long one follow request waits for an event before asking again. */
const FOLLOW_WAIT_MS = 25_000;

export interface OperatorCommandLinks {
  /** The running agent, or null when none answers. */
  remote(json: boolean): Promise<AgentLink | null>;
  /** The running agent, or this process working on the same files. */
  any(json: boolean): Promise<AgentLink>;
}

/** `quantilica events [--follow] [--json]` and `quantilica metrics`: what the hook and Prometheus get, for scripts. */
export function registerOperatorCommands(program: Command, links: OperatorCommandLinks, setExit: (code: number) => void): void {
  program
    .command('events')
    .description(
      'recent operator events (failed, retrying, timeout, stalled, late, recovered, disk-paused, …), as the event hook gets them',
    )
    .option('-f, --follow', 'keep printing events as they happen')
    .option('--json', 'one JSON object per line')
    .option('-n, --limit <n>', 'how many recent events first', parseCount, 20)
    .action(async (opts: { follow?: boolean; json?: boolean; limit: number }) => {
      const link = await links.remote(opts.json === true);
      if (link === null)
        throw new ClientError(
          0,
          ExitCode.agentUnavailable,
          'no agent is running: operator events are kept by the running agent only (start it with `quantilica agent`)',
        );
      let stopped = false;
      const stop = () => {
        stopped = true;
        void link.close();
      };
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      try {
        const print = (events: NumberedOperatorEvent[]) => {
          for (const e of events) process.stdout.write(opts.json ? `${JSON.stringify(e)}\n` : formatEvent(e));
        };
        let { events, next } = await link.listEvents({ limit: opts.limit });
        print(events);
        while (opts.follow && !stopped) {
          try {
            ({ events, next } = await link.listEvents({ after: next, waitMs: FOLLOW_WAIT_MS, limit: 1000 }));
          } catch (err) {
            if (stopped) break;
            throw err;
          }
          print(events);
        }
        setExit(ExitCode.ok);
      } finally {
        process.off('SIGINT', stop);
        process.off('SIGTERM', stop);
        if (!stopped) await link.close();
      }
    });

  program
    .command('metrics')
    .description('the Prometheus metrics (what GET /metrics serves); without an agent, from the run store')
    .action(async () => {
      const link = await links.any(false);
      try {
        process.stdout.write((await link.metrics()).text);
        setExit(ExitCode.ok);
      } finally {
        await link.close();
      }
    });
}

/** One line: time, event, then what it is about (`fetcher=… run=… exit=… reason=… attempt=… log=…`). */
export function formatEvent(e: NumberedOperatorEvent): string {
  const parts = [
    e.fetcher !== null ? `fetcher=${e.fetcher}` : null,
    e.pool !== null ? `pool=${e.pool}` : null,
    e.runId !== null ? `run=${e.runId}` : null,
    e.exitCode !== null ? `exit=${e.exitCode}` : null,
    e.reason !== null ? `reason=${e.reason}` : null,
    e.attempt !== null ? `attempt=${e.attempt}` : null,
    e.logPath !== null ? `log=${e.logPath}` : null,
  ].filter((p) => p !== null);
  return `${e.at}  ${e.event.padEnd(16)}  ${parts.join(' ')}`.trimEnd() + '\n';
}

function parseCount(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 1000)
    throw new ClientError(0, ExitCode.usage, `--limit ${value}: allowed: a whole number from 1 to 1000`);
  return n;
}
