import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import type { RunInfo, SpoolStatus } from '../../shared/protocol';
import { makeTestEnv, runCli, startAgent } from '../support/harness';
import { countByRun, spoolRowsIn } from '../support/spoolRows';
import { waitFor } from '../support/waitFor';

test('spool files deleted under a running agent: detected, reopened, and no event is lost', { timeout: 180_000 }, async (t) => {
  const station = makeTestEnv([{ name: 'quick', pool: 'network-light', argv: ['/bin/true'] }]);
  const runtime = path.join(station.root, 'runtime');
  fs.mkdirSync(runtime, { mode: 0o700 });
  station.env.XDG_RUNTIME_DIR = runtime;
  const spoolPath = station.env.QUANTILICA_TELEMETRY_SPOOL as string;
  t.after(() => fs.rmSync(station.root, { recursive: true, force: true }));
  const agent = await startAgent(station);
  const stopped = new Promise((resolve) => agent.child.once('exit', resolve));
  t.after(async () => {
    agent.child.kill('SIGKILL');
    await stopped;
  });
  const runQuick = async () => {
    const r = await runCli(station, ['run', 'quick', '--json']);
    assert.equal(r.code, 0, r.stderr);
    return (JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as RunInfo).runId;
  };
  // No database configured: every event stays in the spool, so the file is what we check.
  const before = [await runQuick(), await runQuick()];
  assert.equal(countByRun(spoolRowsIn(spoolPath), 'finish').size, 2);

  for (const suffix of ['', '-wal', '-shm']) fs.rmSync(spoolPath + suffix, { force: true });
  const spoolNow = async () => (JSON.parse((await runCli(station, ['status', '--json'])).stdout) as { spool: SpoolStatus }).spool;
  // Found by the agent's own check (within a second or two), not only by the next write.
  await waitFor(() => fs.existsSync(spoolPath), { what: 'the agent to re-create the spool file', timeoutMs: 20_000, intervalMs: 100 });
  const after = [await runQuick(), await runQuick()];
  const status = await spoolNow();
  assert.equal(status.lost, 0);
  assert.match(status.error ?? '', /deleted or replaced while in use/);
  assert.match(agent.stderr(), /deleted or replaced while in use/);

  agent.child.kill('SIGTERM');
  await stopped;
  const rows = spoolRowsIn(spoolPath);
  const starts = countByRun(rows, 'start');
  const finishes = countByRun(rows, 'finish');
  for (const id of [...before, ...after])
    assert.deepEqual([starts.get(id), finishes.get(id)], [1, 1], `run ${id}: one start and one finish in the spool`);
  assert.equal(new Set(rows.map((r) => r.eventId)).size, rows.length, 'no event twice');
});
