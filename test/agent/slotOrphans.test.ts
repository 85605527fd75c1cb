import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { formatOwnerRecord } from '../../agent/slots/ownerRecord';
import { readProcInfo } from '../../shared/node/procInfo';
import { tryLockSlot } from '../support/tryLockSlot';
import { groupExists, makeTestEnv, openOrchestrator, stopAll } from '../support/harness';
import { waitFor } from '../support/waitFor';

// `sleep 600` is the fetcher here (a stand-in for a long download), not the test waiting.
const station = () =>
  makeTestEnv([{ name: 'long', pool: 'cpu-analysis', argv: ['sleep', '600'] }], { CRON_POOL_CPU_ANALYSIS_TIMEOUT: '60' });

async function fillPool({ orchestrator, runManager }: Pick<ReturnType<typeof openOrchestrator>, 'orchestrator' | 'runManager'>) {
  const runs = [await orchestrator.run('long', [], 'cli'), await orchestrator.run('long', [], 'cli')];
  await waitFor(() => runs.every((r) => runManager.get(r.runId)?.status === 'running'), { what: 'both slots to be taken' });
  return runs.map((r) => runManager.get(r.runId)!);
}

test('kill -9 of a holder frees its slot at once', async () => {
  const t = station();
  const { orchestrator, runManager, close } = openOrchestrator(t);
  try {
    const [first] = await fillPool({ orchestrator, runManager });
    const lockPath = path.join(t.lockDir, 'cpu-analysis', `slot_${first.slot}.lock`);
    assert.equal(tryLockSlot(lockPath), null, 'the slot is held while its fetcher lives');
    process.kill(-first.pid!, 'SIGKILL');
    const ended = await orchestrator.waitRun(first.runId);
    assert.equal(ended.status, 'failed');
    assert.equal(ended.signal, 'SIGKILL');
    const lock = tryLockSlot(lockPath);
    assert.ok(lock, 'the slot is free as soon as its holder is dead');
    lock.closeOwnCopy();
  } finally {
    await stopAll(orchestrator, runManager);
    await close();
  }
});

test('a stopped holder is reclaimed: its group killed and the event recorded; running holders are never touched', async () => {
  const t = station();
  const { orchestrator, runManager, spool, close } = openOrchestrator(t);
  try {
    const [stopped, running] = await fillPool({ orchestrator, runManager });
    process.kill(-stopped.pid!, 'SIGSTOP');
    await waitFor(() => readProcInfo(stopped.pid!)?.state === 'T', { what: 'the holder to stop' });
    const next = await orchestrator.run('long', [], 'cli');
    await waitFor(() => runManager.get(next.runId)?.status === 'running', { what: 'the waiting run to get the reclaimed slot' });
    assert.equal(runManager.get(next.runId)!.slot, stopped.slot);
    await waitFor(() => !groupExists(stopped.pid!), { what: 'the stopped group to be gone' });
    assert.equal((await orchestrator.waitRun(stopped.runId)).signal, 'SIGKILL');
    assert.equal(readProcInfo(running.pid!)?.state, 'S', 'the running holder is untouched');
    const reclaimed = spool.readBatch(1000).filter((e) => e.event === 'reclaimed');
    assert.equal(reclaimed.length, 1);
    assert.equal(reclaimed[0].runId, stopped.runId);
  } finally {
    await stopAll(orchestrator, runManager);
    await close();
  }
});

test('a record whose PID is alive with another start time is not the holder: the slot is taken, that process left alone', async () => {
  const t = station();
  const dir = path.join(t.lockDir, 'cpu-analysis');
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  // An unrelated, stopped process now has the PID the record names (PID reuse).
  const stranger = spawn('sleep', ['600'], { stdio: 'ignore' });
  process.kill(stranger.pid!, 'SIGSTOP');
  await waitFor(() => readProcInfo(stranger.pid!)?.state === 'T', { what: 'the stranger to stop' });
  const info = readProcInfo(stranger.pid!)!;
  const stale = formatOwnerRecord({
    pid: stranger.pid!,
    startTime: info.startTime - 1,
    fetcher: 'long',
    runId: 'gone-00000000',
    since: '2026-01-01T00:00:00Z',
    agentPid: 1,
  });
  fs.writeFileSync(path.join(dir, 'slot_0.lock'), stale, { mode: 0o600 });
  fs.writeFileSync(path.join(dir, 'slot_1.lock'), stale, { mode: 0o600 });
  // Slot 1 is really held by a live, running process whose record is that stale one.
  const holder = spawn('flock', ['-n', path.join(dir, 'slot_1.lock'), 'cat'], { stdio: ['pipe', 'ignore', 'inherit'] });
  const { orchestrator, runManager, close } = openOrchestrator(t);
  try {
    await waitFor(() => orchestrator.poolStates().find((p) => p.name === 'cpu-analysis')!.used === 1, { what: 'flock to hold slot 1' });
    const run = await orchestrator.run('long', [], 'cli');
    await waitFor(() => runManager.get(run.runId)?.status === 'running', { what: 'the run to take the stale slot' });
    assert.equal(runManager.get(run.runId)!.slot, 0);
    assert.match(fs.readFileSync(path.join(dir, 'slot_0.lock'), 'utf8'), new RegExp(`"runId":"${run.runId}"`));
    const second = await orchestrator.run('long', [], 'cli');
    await waitFor(() => runManager.get(second.runId)?.wait?.kind === 'pool', { what: 'the second run to wait' });
    assert.equal(readProcInfo(stranger.pid!)?.state, 'T', 'the process that reused the PID is never signalled');
    assert.equal(holder.exitCode, null, 'the live holder of slot 1 keeps it');
    assert.equal(runManager.get(second.runId)!.status, 'waiting');
  } finally {
    holder.stdin.end();
    stranger.kill('SIGKILL');
    await stopAll(orchestrator, runManager);
    await close();
  }
});

test('a live, running holder is never reclaimed: a waiter times out instead', async () => {
  const t = makeTestEnv([{ name: 'long', pool: 'cpu-analysis', argv: ['sleep', '600'] }], { CRON_POOL_CPU_ANALYSIS_TIMEOUT: '1' });
  const { orchestrator, runManager, close } = openOrchestrator(t);
  try {
    const holders = await fillPool({ orchestrator, runManager });
    const waiter = await orchestrator.run('long', [], 'cli');
    const ended = await orchestrator.waitRun(waiter.runId);
    assert.equal(ended.status, 'failed');
    assert.equal(ended.reason, 'wait-timeout');
    for (const h of holders) {
      assert.equal(runManager.get(h.runId)!.status, 'running');
      assert.notEqual(readProcInfo(h.pid!), null);
    }
  } finally {
    await stopAll(orchestrator, runManager);
    await close();
  }
});

test('lowering the pool size while a higher slot is held never over-books', async () => {
  const t = station();
  const first = openOrchestrator(t);
  const [a, b] = await fillPool(first);
  // The holder of slot 0 ends; slot 1 stays held by a run of the old 2-slot configuration.
  const low = a.slot === 1 ? a : b;
  const high = a.slot === 1 ? b : a;
  await first.orchestrator.cancel({ runId: high.runId });
  await first.orchestrator.waitRun(high.runId);
  const shrunk = makeTestEnv(
    [{ name: 'long', pool: 'cpu-analysis', argv: ['sleep', '600'] }],
    { CRON_POOL_CPU_ANALYSIS_SLOTS: '1', CRON_POOL_CPU_ANALYSIS_TIMEOUT: '1' },
    { lockDir: t.lockDir },
  );
  const second = openOrchestrator(shrunk);
  try {
    const run = await second.orchestrator.run('long', [], 'cli');
    const ended = await second.orchestrator.waitRun(run.runId);
    assert.equal(ended.reason, 'wait-timeout', 'slot 0 is free but the pool of 1 is full with slot 1');
    assert.equal(first.runManager.get(low.runId)!.status, 'running');
  } finally {
    await stopAll(first.orchestrator, first.runManager);
    await second.close();
    await first.close();
  }
});
