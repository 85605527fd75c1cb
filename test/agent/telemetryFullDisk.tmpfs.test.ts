import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import type { RunInfo, SpoolStatus } from '../../shared/protocol';
import { memoryLogger } from '../support/memoryLogger';
import { RunStore, type StoredRun } from '../../agent/runs/runStore';
import { Spool } from '../../agent/telemetry/spool';
import { listRuns, makeTestEnv, runCli, startAgent } from '../support/harness';
import { fillUp, freeUp, mountSmallTmpfs } from '../support/smallTmpfs';
import { countByRun, spoolRowsIn } from '../support/spoolRows';
import { waitFor } from '../support/waitFor';

const RUNS = 6;

test(
  'a full QUANTILICA_HOME: the agent lives, runs finish, every start and finish reaches the configured spool once space returns',
  { timeout: 300_000 },
  async (t) => {
    const home = mountSmallTmpfs(t, 8);
    if (home === null) return t.skip('needs a tmpfs mount (root)');
    const station = makeTestEnv([{ name: 'quick', pool: 'network-light', argv: ['/bin/true'] }], {
      QUANTILICA_HOME: home,
      QUANTILICA_TELEMETRY_SPOOL: path.join(home, 'telemetry_spool.db'),
      CRON_POOL_NETWORK_LIGHT_SLOTS: String(RUNS),
    });
    const runtime = path.join(station.root, 'runtime');
    fs.mkdirSync(runtime, { mode: 0o700 });
    station.env.XDG_RUNTIME_DIR = runtime;
    t.after(() => fs.rmSync(station.root, { recursive: true, force: true }));
    const agent = await startAgent(station);
    const stopped = new Promise((resolve) => agent.child.once('exit', resolve));
    t.after(async () => {
      agent.child.kill('SIGKILL');
      await stopped;
    });
    const filler = path.join(home, 'filler');
    fillUp(filler);

    const results = await Promise.all(Array.from({ length: RUNS }, () => runCli(station, ['run', 'quick', '--json'])));
    assert.deepEqual(
      results.map((r) => r.code),
      results.map(() => 0),
      results.map((r) => r.stderr).join('\n'),
    );
    const ids = results.map((r) => (JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as RunInfo).runId);
    assert.equal(agent.child.exitCode, null, 'the agent is alive');
    const spoolNow = async () => (JSON.parse((await runCli(station, ['status', '--json'])).stdout) as { spool: SpoolStatus }).spool;
    const during = await spoolNow();
    assert.equal(during.lost, 0, 'nothing lost');
    assert.ok(during.fallback || (during.held ?? 0) > 0, `events went to the fallback or memory: ${JSON.stringify(during)}`);
    // The run state lives in the spool's database: one message says that file cannot be written.
    assert.match(
      agent.stderr(),
      /telemetry spool .* cannot be written: SQLITE_FULL/,
      'the agent says the spool (events and run state) could not be written',
    );

    freeUp(filler);
    await waitFor(
      async () => {
        const s = await spoolNow();
        return !s.fallback && s.held === 0 && s.path === path.join(home, 'telemetry_spool.db');
      },
      { what: 'the spool back on the configured file', timeoutMs: 60_000, intervalMs: 500 },
    );
    const runs = await listRuns(station);
    for (const id of ids) assert.equal(runs.find((r) => r.runId === id)?.status, 'completed', `run ${id} recorded completed`);
    agent.child.kill('SIGTERM');
    await stopped;

    const rows = spoolRowsIn(path.join(home, 'telemetry_spool.db'));
    const starts = countByRun(rows, 'start');
    const finishes = countByRun(rows, 'finish');
    for (const id of ids)
      assert.deepEqual([starts.get(id), finishes.get(id)], [1, 1], `run ${id}: one start, one finish in the configured spool`);
    assert.equal(spoolRowsIn(path.join(runtime, 'quantilica', 'quantilica_telemetry_spool.db')).length, 0, 'the fallback was drained');
  },
);

test(
  'RunStore.save on a full disk never throws: the newest state waits in memory and is written when space returns',
  { timeout: 120_000 },
  async (t) => {
    const dir = mountSmallTmpfs(t, 4);
    if (dir === null) return t.skip('needs a tmpfs mount (root)');
    const logger = memoryLogger();
    // The configured spool and its fallback on the same full disk: no file takes the run states.
    const spoolAt = {
      path: path.join(dir, 'spool.db'),
      fallbackPath: path.join(dir, 'fb', 'fallback.db'),
      reopenIntervalMs: 200,
      closeWaitMs: 0,
    };
    const spool = new Spool({ ...spoolAt, logger });
    const store = new RunStore(spool, null, logger);
    t.after(() => spool.close());
    const run = (i: number, status: StoredRun['status']): StoredRun => ({
      runId: `run-${i}`,
      fetcher: 'f',
      pool: 'heavy-io',
      status,
      trigger: 'cli',
      args: ['x'.repeat(20_000)],
      enqueuedAt: new Date(Date.now() + i).toISOString(),
      startedAt: null,
      finishedAt: null,
      slot: null,
      pid: null,
      exitCode: null,
      signal: null,
      reason: null,
      wait: null,
      logPath: null,
      startTime: null,
      statusFile: null,
      ownerPid: process.pid,
      ownerStartTime: 0,
    });
    fillUp(path.join(dir, 'filler'));
    await Promise.all(Array.from({ length: 20 }, (_, i) => store.save(run(i, 'running'))));
    await store.save(run(0, 'completed'));
    assert.ok(store.health().unsaved > 0, 'some states wait in memory');
    assert.match(store.health().error ?? '', /SQLITE_FULL|disk is full/);
    assert.equal(store.get('run-0')?.status, 'completed', 'the newest state is what reads see');
    assert.ok(logger.records.some((r) => r.level === 'error' && /cannot be written/.test(r.msg ?? '')));
    freeUp(path.join(dir, 'filler'));
    await waitFor(() => store.health().unsaved === 0, { what: 'the retry to write the states', timeoutMs: 30_000 });
    assert.equal(store.health().error, null);
    spool.close();
    const reopenedSpool = new Spool({ ...spoolAt, logger: memoryLogger() });
    try {
      const reopened = new RunStore(reopenedSpool, null);
      assert.equal(reopened.get('run-0')?.status, 'completed');
      assert.equal(reopened.recent(100).length, 20);
    } finally {
      reopenedSpool.close();
    }
  },
);
