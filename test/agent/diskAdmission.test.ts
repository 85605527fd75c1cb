import * as fs from 'node:fs';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { listRuns, makeTestEnv, runCli, startAgent } from '../support/harness';
import { waitFor } from '../support/waitFor';

const MB = 1024 * 1024;

test('a run that can never fit fails at once with admission-impossible and the numbers', { timeout: 60000 }, async () => {
  const probe = makeTestEnv(null);
  const { blocks, bsize } = fs.statfsSync(probe.root);
  const t = makeTestEnv([{ name: 'huge', pool: 'heavy-io', argv: ['true'], expectedSizeMb: Math.ceil((2 * blocks * bsize) / MB) }]);
  const started = Date.now();
  const result = await runCli(t, ['run', 'huge']);
  assert.match(result.stdout, /failed \(admission-impossible\)/, result.stdout + result.stderr);
  assert.match(
    result.stderr + result.stdout,
    /holds [\d.]+ GB in total and the gate keeps 0.0001 GB free \(CRON_DISK_PAUSE_GB\): at most [\d.]+ GB can ever be admitted/,
  );
  assert.equal(result.code, 81, 'refused (81), not a wait timeout (75)');
  assert.ok(Date.now() - started < 20000, 'refused at once, not after a wait');
});

test('a run waiting at the disk gate for space does not hold back runs of any pool that fit', { timeout: 90000 }, async () => {
  const probe = makeTestEnv(null);
  const { blocks, bavail, bsize } = fs.statfsSync(probe.root);
  // More than is free now, less than the filesystem holds: it may fit one day, so it waits.
  const bigMb = Math.floor((bavail * bsize + ((blocks - bavail) * bsize) / 2) / MB);
  const t = makeTestEnv(
    [
      { name: 'big', pool: 'heavy-io', argv: ['true'], expectedSizeMb: bigMb },
      { name: 'quick', pool: 'network-light', argv: ['true'] },
      { name: 'small-heavy', pool: 'heavy-io', argv: ['true'], expectedSizeMb: 1 },
    ],
    { CRON_DISK_MAX_WAIT_SECONDS: '600', CRON_DISK_POLL_SECONDS: '1' },
  );
  const agent = await startAgent(t);
  try {
    const big = await runCli(t, ['run', 'big', '--detach', '--json']);
    assert.equal(big.code, 0, big.stderr);
    const bigId = (JSON.parse(big.stdout) as RunInfo).runId;
    await waitFor(async () => (await listRuns(t)).find((r) => r.runId === bigId)?.wait?.kind === 'admission', {
      what: 'the big run to wait for admission',
      timeoutMs: 20000,
    });
    for (const name of ['quick', 'small-heavy']) {
      const started = Date.now();
      const r = await runCli(t, ['run', name], 30000);
      assert.equal(r.code, 0, `${name}: ${r.stdout}${r.stderr}`);
      assert.ok(Date.now() - started < 20000, `${name} was not held back by the waiting run`);
    }
    const bigNow = (await listRuns(t)).find((r) => r.runId === bigId)!;
    assert.equal(bigNow.status, 'waiting', 'the big run still waits for its space');
    const cancelled = await runCli(t, ['cancel', bigId]);
    assert.equal(cancelled.code, 0, cancelled.stderr);
  } finally {
    agent.child.kill('SIGTERM');
    await new Promise((resolve) => agent.child.once('exit', resolve));
  }
});
