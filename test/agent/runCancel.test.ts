import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { tryLockSlot } from '../support/tryLockSlot';
import { FIXTURES, groupMembers, makeTestEnv, openOrchestrator, stopAll } from '../support/harness';
import { waitFor } from '../support/waitFor';

test('cancel of a group that ignores SIGTERM and has grandchildren: nothing left after grace + 1 s, slot freed, status cancelled', async () => {
  const t = makeTestEnv([{ name: 'stubborn', pool: 'network-light', argv: [path.join(FIXTURES, 'stubbornGroup.sh')] }], {
    QUANTILICA_CANCEL_GRACE_SECONDS: '1',
  });
  const { orchestrator, runManager, close } = openOrchestrator(t);
  try {
    const run = await orchestrator.run('stubborn', [], 'cli');
    const running = await waitFor(
      () => {
        const r = runManager.get(run.runId);
        return r?.status === 'running' && groupMembers(r.pid!).length >= 4 ? r : null;
      },
      { what: 'the wrapper, the fetcher and two grandchildren to run' },
    );
    const pgid = running.pid!;
    const cancelledAt = Date.now();
    runManager.cancel(run.runId);
    // SIGTERM is ignored by all of them: until the grace period ends, the group lives on.
    const ended = await orchestrator.waitRun(run.runId);
    const elapsed = Date.now() - cancelledAt;
    assert.equal(ended.status, 'cancelled');
    assert.deepEqual(groupMembers(pgid), [], "no process of the run's group is left");
    assert.ok(elapsed >= 1000, `the group got its grace period (${elapsed} ms)`);
    assert.ok(elapsed < 2000, `everything was gone within grace + 1 s (${elapsed} ms)`);
    const lock = tryLockSlot(path.join(t.lockDir, 'network-light', `slot_${running.slot}.lock`));
    assert.ok(lock, 'the slot is free');
    lock.closeOwnCopy();
  } finally {
    await stopAll(orchestrator, runManager);
    await close();
  }
});

test('cancelling a waiting run takes it out of the queue', async () => {
  const t = makeTestEnv([{ name: 'long', pool: 'cpu-analysis', argv: ['sleep', '600'] }], { CRON_POOL_CPU_ANALYSIS_SLOTS: '1' });
  const { orchestrator, runManager, close } = openOrchestrator(t);
  try {
    const holder = await orchestrator.run('long', [], 'cli');
    await waitFor(() => runManager.get(holder.runId)?.status === 'running', { what: 'the holder to run' });
    const waiting = await orchestrator.run('long', [], 'cli');
    const behind = await orchestrator.run('long', [], 'cli');
    await waitFor(() => runManager.get(behind.runId)?.wait?.kind === 'pool', { what: 'two runs waiting' });
    assert.deepEqual(runManager.get(behind.runId)!.wait, { kind: 'pool', position: 2 });
    runManager.cancel(waiting.runId);
    const ended = await orchestrator.waitRun(waiting.runId);
    assert.equal(ended.status, 'cancelled');
    assert.equal(ended.pid, null, 'it never started');
    await waitFor(() => runManager.get(behind.runId)?.wait?.kind === 'pool' && runManager.get(behind.runId)!.wait, {
      what: 'the queue to move up',
    });
    assert.deepEqual(runManager.get(behind.runId)!.wait, { kind: 'pool', position: 1 });
    assert.equal(orchestrator.poolStates().find((p) => p.name === 'cpu-analysis')!.waiting, 1);
  } finally {
    await stopAll(orchestrator, runManager);
    await close();
  }
});

test('a fetcher writing 100 MB to stdout does not block, and its log is capped', { timeout: 60000 }, async () => {
  const capMb = 1;
  const t = makeTestEnv([{ name: 'flood', pool: 'network-light', argv: ['head', '-c', String(100 * 1024 * 1024), '/dev/zero'] }], {
    QUANTILICA_LOG_CAP_MB: String(capMb),
  });
  const { orchestrator, close } = openOrchestrator(t);
  try {
    const run = await orchestrator.run('flood', [], 'cli');
    const ended = await orchestrator.waitRun(run.runId);
    assert.equal(ended.status, 'completed');
    assert.equal(ended.exitCode, 0);
    const size = fs.statSync(ended.logPath!).size;
    assert.ok(size <= capMb * 1024 * 1024, `log is ${size} bytes, over its cap`);
    assert.match(fs.readFileSync(ended.logPath!, 'utf8').split('\n')[0], /over its cap of 1048576 bytes; \d+ earlier bytes dropped/);
  } finally {
    await close();
  }
});

test('exit codes and signals are recorded as the fetcher ended', async () => {
  const t = makeTestEnv([
    { name: 'fails', pool: 'network-light', argv: ['sh', '-c', 'echo failing >&2; exit 7'] },
    { name: 'ok', pool: 'network-light', argv: ['true'] },
    { name: 'missing', pool: 'network-light', argv: ['/nonexistent/fetcher'] },
  ]);
  const { orchestrator, close } = openOrchestrator(t);
  try {
    const [fails, ok, missing] = await Promise.all(
      ['fails', 'ok', 'missing'].map(async (f) => orchestrator.waitRun((await orchestrator.run(f, [], 'cli')).runId)),
    );
    assert.equal(fails.status, 'failed');
    assert.equal(fails.exitCode, 7);
    assert.equal(fs.readFileSync(fails.logPath!, 'utf8'), 'failing\n');
    assert.equal(ok.status, 'completed');
    // The documented RunInfo shape, and nothing of the agent's internal bookkeeping.
    // (The memory fields: peak memory and CPU of the run, its ceiling, the OOM kills its cgroup counted.)
    assert.deepEqual(Object.keys(ok).sort(), [
      'args',
      'attempt',
      'attempts',
      'cpuSeconds',
      'deadline',
      'enqueuedAt',
      'exitCode',
      'fetcher',
      'finishedAt',
      'logGrewAt',
      'logPath',
      'memoryLimitMb',
      'memoryMb',
      'memorySource',
      'oomKills',
      'peakMemoryMb',
      'pid',
      'pool',
      'reason',
      'runId',
      'signal',
      'slot',
      'stalledSince',
      'startedAt',
      'status',
      'trigger',
      'wait',
    ]);
    assert.deepEqual(Object.keys(orchestrator.listRuns(10)[0]).sort(), Object.keys(ok).sort());
    assert.equal(missing.status, 'failed');
    assert.equal(missing.exitCode, 127);
  } finally {
    await close();
  }
});

test('waiting runs of a pool are served first come, first served', async () => {
  const t = makeTestEnv([{ name: 'until-file', pool: 'cpu-analysis', argv: [path.join(FIXTURES, 'exitWhenFileExists.sh')] }], {
    CRON_POOL_CPU_ANALYSIS_SLOTS: '1',
  });
  const { orchestrator, runManager, close } = openOrchestrator(t);
  try {
    const go = path.join(t.root, 'go');
    const holder = await orchestrator.run('until-file', [go, '0'], 'cli');
    await waitFor(() => runManager.get(holder.runId)?.status === 'running', { what: 'the holder to run' });
    const queued = await Promise.all(Array.from({ length: 4 }, () => orchestrator.run('until-file', [go, '0'], 'cli')));
    const started: string[] = [];
    const stop = orchestrator.hub.onChange(({ change }) => {
      if (change.kind === 'run' && change.run.status === 'running') started.push(change.run.runId);
    });
    fs.writeFileSync(go, '');
    await Promise.all(queued.map((r) => orchestrator.waitRun(r.runId)));
    stop();
    assert.deepEqual(
      started,
      queued.map((r) => r.runId),
    );
  } finally {
    await stopAll(orchestrator, runManager);
    await close();
  }
});
