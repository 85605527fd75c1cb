import { spawn } from 'node:child_process';
import type { RunInfo } from '../../shared/protocol';
import { ClientError } from '../errors';

/** What the detached owner reports on fd 3: its run, or why there is none. */
export type OwnerReport = { run: RunInfo } | { error: string; exitCode: number; code: number };

/**
 * `run --detach` without an agent: someone must stay to start the run when its slot is free, watch
 * it and record its end. A detached `quantilica run-owner` process (its own session, no terminal)
 * does that; it reports the queued run (or the refusal) on a pipe, and this command returns.
 */
export function startDetachedOwner(agentJs: string, fetcher: string, args: string[]): Promise<RunInfo> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [agentJs, 'run-owner', fetcher, '--', ...args], {
      detached: true,
      stdio: ['ignore', 'ignore', 'ignore', 'pipe'],
      env: process.env,
    });
    let text = '';
    const report = child.stdio[3];
    if (!report) {
      reject(new Error('cannot open the pipe to the detached run owner'));
      return;
    }
    report.on('data', (chunk: Buffer) => {
      if (text.length < 1 << 20) text += chunk.toString('utf8');
    });
    report.on('end', () => {
      child.unref();
      let parsed: OwnerReport;
      try {
        parsed = JSON.parse(text) as OwnerReport;
      } catch {
        reject(new Error(`the detached run owner ended without reporting its run (${text.trim().slice(0, 200) || 'no output'})`));
        return;
      }
      if ('run' in parsed) resolve(parsed.run);
      else reject(new ClientError(parsed.code, parsed.exitCode, parsed.error));
    });
    child.once('error', (err) => reject(new Error(`cannot start the detached run owner: ${err.message}`)));
  });
}
