import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { readProcInfo } from '../../shared/node/procInfo';
import { tryLockSlot } from '../support/tryLockSlot';
import { FIXTURES, groupMembers, listRuns, makeTestEnv, openOrchestrator, runCli, startAgent, stopAll } from '../support/harness';
import { waitFor } from '../support/waitFor';

function commOf(pid: number): string | null {
  try {
    return fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return null;
  }
}

function slotFree(lockDir: string, pool: string, slot: number): boolean {
  const lock = tryLockSlot(path.join(lockDir, pool, `slot_${slot}.lock`));
  if (!lock) return false;
  lock.closeOwnCopy();
  return true;
}

test(
  'a process that outlives its wrapper keeps the run running (reason lingering) and its slot; cancel stops it',
  { timeout: 60000 },
  async () => {
    const t = makeTestEnv([{ name: 'leaves-child', pool: 'network-light', argv: ['sh', '-c', 'sleep 300 & echo started; exit 0'] }], {
      QUANTILICA_CANCEL_GRACE_SECONDS: '1',
    });
    const { orchestrator, runManager, close } = openOrchestrator(t);
    try {
      const run = await orchestrator.run('leaves-child', [], 'cli');
      const lingering = await waitFor(
        () => {
          const r = runManager.get(run.runId);
          return r?.reason === 'lingering' ? r : null;
        },
        { what: 'the run to report its lingering process', timeoutMs: 20000 },
      );
      assert.equal(lingering.status, 'running', 'the run is not over while a process holding its slot lives');
      const pgid = lingering.pid!;
      const members = groupMembers(pgid);
      assert.equal(members.length, 1, `one sleep is left (${members.join(', ')})`);
      assert.equal(slotFree(t.lockDir, 'network-light', lingering.slot!), false, 'the lingering process holds the slot');

      runManager.cancel(run.runId);
      const ended = await orchestrator.waitRun(run.runId);
      assert.equal(ended.status, 'cancelled');
      assert.equal(ended.reason, 'cancelled');
      assert.deepEqual(groupMembers(pgid), [], 'cancel reached the lingering process');
      assert.ok(slotFree(t.lockDir, 'network-light', lingering.slot!), 'the slot is free');
    } finally {
      await stopAll(orchestrator, runManager);
      await close();
    }
  },
);

test("a lingering process that ends by itself ends the run with the fetcher's own exit code", { timeout: 60000 }, async () => {
  const t = makeTestEnv([{ name: 'short-child', pool: 'network-light', argv: ['sh', '-c', 'sleep 1.5 & exit 3'] }]);
  const { orchestrator, runManager, close } = openOrchestrator(t);
  try {
    const run = await orchestrator.run('short-child', [], 'cli');
    await waitFor(() => runManager.get(run.runId)?.reason === 'lingering', { what: 'the run to linger', timeoutMs: 20000 });
    const ended = await orchestrator.waitRun(run.runId);
    assert.equal(ended.status, 'failed');
    assert.equal(ended.exitCode, 3);
    assert.equal(ended.reason, 'exit-code', 'reasons are tokens');
    assert.deepEqual(groupMembers(ended.pid!), []);
  } finally {
    await close();
  }
});

test(
  "the runbook's kill (fuser -k -KILL on the slot file) fails the run with exit code 137 and SIGKILL; the CLI exits 137",
  { timeout: 60000 },
  async () => {
    const t = makeTestEnv([{ name: 'sleeper', pool: 'heavy-io', argv: ['sleep', '300'] }]);
    const cli = runCli(t, ['run', 'sleeper']);
    // The CLI runs in-process (no agent). The owner record names the run once its wrapper runs; the
    // runbook's kill reaches the fetcher only once the fetcher itself holds the slot file (a kill
    // before that would leave the wrapper's subshell to start it, and the run would go on).
    const slotFile = path.join(t.lockDir, 'heavy-io', 'slot_0.lock');
    await waitFor(
      () => {
        if (!fs.existsSync(slotFile) || !/"runId"/.test(fs.readFileSync(slotFile, 'utf8'))) return false;
        const holders = spawnSync('fuser', [slotFile], { encoding: 'utf8' }).stdout.trim().split(/\s+/).filter(Boolean);
        return holders.some((pid) => commOf(Number(pid)) === 'sleep');
      },
      { what: 'the fetcher to hold slot 0', timeoutMs: 20000 },
    );
    const fuser = spawnSync('fuser', ['-k', '-KILL', slotFile], { encoding: 'utf8' });
    assert.equal(fuser.status, 0, fuser.stderr);
    const result = await cli;
    assert.equal(result.code, 137, result.stdout + result.stderr);
    assert.match(result.stdout, /failed exit 137 \(signal\)/);
    const run = (await listRuns(t)).find((r) => r.fetcher === 'sleeper')!;
    assert.deepEqual([run.status, run.exitCode, run.signal, run.reason], ['failed', 137, 'SIGKILL', 'signal']);
  },
);

// What dies besides the agent: with the thread spawner, the runWrapper.sh of each run (its pid is the
// one recorded); with the native spawner, the spawner process, parent of every run's waiter.
for (const spawner of ['thread', 'native'] as const) {
  test(
    `${spawner} spawner: ${spawner === 'thread' ? 'a wrapper' : 'the spawner'} killed while no agent watches: the next agent waits for the fetcher and records its real exit code and end time`,
    { timeout: 120000 },
    async (t) => {
      const station = makeTestEnv([{ name: 'until-file', pool: 'heavy-io', argv: [path.join(FIXTURES, 'exitWhenFileExists.sh')] }], {
        QUANTILICA_SPAWNER: spawner,
      });
      const release = (i: number) => path.join(station.root, `release-${i}`);
      const first = await startAgent(station);
      const runIds: string[] = [];
      for (let i = 0; i < 2; i++) {
        const r = await runCli(station, ['run', 'until-file', '--detach', '--json', '--', release(i), '7']);
        assert.equal(r.code, 0, r.stderr);
        runIds.push((JSON.parse(r.stdout) as RunInfo).runId);
      }
      const running = await waitFor(
        async () => {
          const all = await listRuns(station);
          const two = runIds.map((id) => all.find((r) => r.runId === id));
          // Under runWrapper.sh a group is the wrapper, its subshell and the fetcher; natively the fetcher leads it.
          return two.every((r) => r?.status === 'running' && groupMembers(r.pid!).length >= (spawner === 'thread' ? 3 : 1))
            ? (two as RunInfo[])
            : null;
        },
        { what: 'two fetchers running', timeoutMs: 20000 },
      );
      const wrappers = running.map((r) => r.pid!);
      // The native spawner: the parent of each run's waiter (the fetcher's parent).
      const spawners = [...new Set(wrappers.map((pid) => readProcInfo(readProcInfo(pid)?.ppid ?? 0)?.ppid ?? 0))];
      if (spawner === 'native')
        assert.deepEqual(
          spawners.map((pid) => readProcInfo(pid)?.ppid),
          [first.child.pid],
          "one spawner, the agent's child",
        );

      first.child.kill('SIGKILL');
      await new Promise((resolve) => first.child.once('exit', resolve));
      if (spawner === 'thread') {
        // Only the wrappers die; their fetchers run on, holding the slots.
        for (const pid of wrappers) process.kill(pid, 'SIGKILL');
        await waitFor(() => wrappers.every((pid) => !groupMembers(pid).includes(pid)), { what: 'the wrappers to be gone' });
      } else {
        process.kill(spawners[0], 'SIGKILL');
        await waitFor(() => readProcInfo(spawners[0]) === null || readProcInfo(spawners[0])?.state === 'Z', {
          what: 'the spawner to be gone',
        });
      }
      for (const pid of wrappers) assert.ok(groupMembers(pid).length >= 1, 'the fetcher outlived its wrapper');

      // The first fetcher ends while no agent watches; the second still runs when the next agent starts.
      fs.writeFileSync(release(0), '');
      await waitFor(() => groupMembers(wrappers[0]).length === 0, { what: 'the first fetcher to end' });
      // The native spawner's waiter is not in the fetcher's group: it writes the status file once it
      // has reaped the fetcher, which may be just after the group is empty.
      const statusFile = path.join(station.home, '.quantilica', 'runs', `${runIds[0]}.exit`);
      await waitFor(() => (fs.existsSync(statusFile) && fs.readFileSync(statusFile, 'utf8').endsWith('\n') ? true : null), {
        what: "the first run's status file",
      });
      const statusTime = fs.statSync(statusFile).mtime;
      const endedBefore = Date.now();

      const second = await startAgent(station);
      try {
        const adopted = await waitFor(
          async () => {
            const all = await listRuns(station);
            const r = all.find((x) => x.runId === runIds[0]);
            return r && r.status !== 'running' ? all : null;
          },
          { what: 'the first run to be finished by the next agent', timeoutMs: 20000 },
        );
        const firstRun = adopted.find((r) => r.runId === runIds[0])!;
        t.diagnostic(
          `first run: ${firstRun.status} ${firstRun.exitCode} finished ${firstRun.finishedAt}, status file ${statusTime.toISOString()}`,
        );
        assert.deepEqual([firstRun.status, firstRun.exitCode, firstRun.reason], ['failed', 7, 'exit-code']);
        assert.equal(Date.parse(firstRun.finishedAt!), statusTime.getTime(), "finishedAt is the status file's time");
        assert.ok(Date.parse(firstRun.finishedAt!) <= endedBefore);

        const secondRun = adopted.find((r) => r.runId === runIds[1])!;
        assert.equal(secondRun.status, 'running', 'the next agent waits while a process of the run lives');
        fs.writeFileSync(release(1), '');
        const ended = await waitFor(
          async () => {
            const r = (await listRuns(station)).find((x) => x.runId === runIds[1]);
            return r && r.status !== 'running' ? r : null;
          },
          { what: 'the second run to end', timeoutMs: 20000 },
        );
        assert.deepEqual([ended.status, ended.exitCode, ended.reason], ['failed', 7, 'exit-code']);
      } finally {
        second.child.kill('SIGTERM');
        await new Promise((resolve) => second.child.once('exit', resolve));
      }
    },
  );
}

test(
  "a wrapper killed while the agent watches: the run goes on until its fetcher ends, with the fetcher's exit code",
  { timeout: 60000 },
  async () => {
    const t = makeTestEnv([{ name: 'until-file', pool: 'network-light', argv: [path.join(FIXTURES, 'exitWhenFileExists.sh')] }]);
    const { orchestrator, runManager, close } = openOrchestrator(t);
    const go = path.join(t.root, 'go');
    try {
      const run = await orchestrator.run('until-file', [go, '7'], 'cli');
      const running = await waitFor(
        () => {
          const r = runManager.get(run.runId);
          return r?.status === 'running' && groupMembers(r.pid!).length >= 3 ? r : null;
        },
        { what: 'the wrapper, its subshell and the fetcher to run' },
      );
      process.kill(running.pid!, 'SIGKILL');
      const lingering = await waitFor(
        () => {
          const r = runManager.get(run.runId);
          return r?.reason === 'lingering' ? r : null;
        },
        { what: 'the run to note that its wrapper is gone', timeoutMs: 20000 },
      );
      assert.equal(lingering.status, 'running', 'the fetcher still runs, so the run does');
      assert.equal(slotFree(t.lockDir, 'network-light', running.slot!), false);
      fs.writeFileSync(go, '');
      const ended = await orchestrator.waitRun(run.runId);
      assert.deepEqual([ended.status, ended.exitCode, ended.signal, ended.reason], ['failed', 7, null, 'exit-code']);
      assert.ok(slotFree(t.lockDir, 'network-light', running.slot!));
    } finally {
      await stopAll(orchestrator, runManager);
      await close();
    }
  },
);
