import { spawn } from 'node:child_process';
import * as path from 'node:path';
import * as readline from 'node:readline';
import { REPO } from './harness';

/**
 * The GitHub simulator as its own process (`npm run simulate:github`), so the process that starts it
 * only measures: its URL and repositories from the line it prints when ready.
 */
export async function simulatorProcess(args: string[]): Promise<{ url: string; repos: string[]; stop(): Promise<void> }> {
  const child = spawn(process.execPath, [path.join(REPO, 'dist', 'githubSimulator.js'), '--port', '0', ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const line = await new Promise<string>((resolve, reject) => {
    readline.createInterface({ input: child.stdout }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`simulator exited ${code}`)));
  });
  const { url, repos } = JSON.parse(line) as { url: string; repos: number };
  return {
    url,
    repos: Array.from({ length: repos }, (_, i) => `sim-org/repo-${String(i + 1).padStart(3, '0')}`),
    stop: () =>
      new Promise((resolve) => {
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}
