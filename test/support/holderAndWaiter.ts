import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { listRuns, runCli, type TestEnv } from './harness';
import { waitFor } from './waitFor';

/**
 * Starts two detached runs of `fetcher` in a one-slot pool through the CLI and waits until the first
 * holds the slot and the second waits for it: the set-up of the agent-stop tests.
 */
export async function holderAndWaiter(
  t: TestEnv,
  fetcher: string,
): Promise<{ ids: string[]; holder: RunInfo; runs: () => Promise<RunInfo[]> }> {
  const ids: string[] = [];
  for (let i = 0; i < 2; i++) {
    const r = await runCli(t, ['run', fetcher, '--detach', '--json']);
    assert.equal(r.code, 0, r.stderr);
    ids.push((JSON.parse(r.stdout) as RunInfo).runId);
  }
  const runs = (): Promise<RunInfo[]> => listRuns(t);
  const holder = await waitFor(
    async () => {
      const all = await runs();
      const [h, w] = ids.map((id) => all.find((r) => r.runId === id));
      return h?.status === 'running' && w?.wait?.kind === 'pool' ? h : null;
    },
    { what: 'one run holding the only slot and one waiting for it', timeoutMs: 20000 },
  );
  return { ids, holder, runs };
}
