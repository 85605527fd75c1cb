import assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { listRuns, runCli, type TestEnv } from './harness';

/** A run of the station as `quantilica runs --json` lists it (the newest 50). */
export async function runOf(env: TestEnv, runId: string): Promise<RunInfo> {
  const run = (await listRuns(env, ['--limit', '50'])).find((x) => x.runId === runId);
  assert.ok(run, `run ${runId} is listed`);
  return run;
}

/** Queues a run of the station's `github` entry (`run github --detach`) and gives its id. */
export async function startSync(env: TestEnv): Promise<string> {
  const r = await runCli(env, ['run', 'github', '--detach', '--json']);
  assert.equal(r.code, 0, r.stderr);
  return (JSON.parse(r.stdout) as RunInfo).runId;
}
