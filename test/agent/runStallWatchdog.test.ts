// The stall watchdog: a run whose log has not grown for its stallSeconds is marked stalled (a `stalled`
// event, `stalledSince`, shown by status); with onStall: cancel it ends cancelled/stalled. Heartbeats
// carry the time the log last grew.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { memoryLogger } from '../support/memoryLogger';
import { Spool } from '../../agent/telemetry/spool';
import { FIXTURES, groupMembers, listRuns, makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';
import { waitFor } from '../support/waitFor';

const SILENT = path.join(FIXTURES, 'silentAfterOneLine.sh');
const stations: TestEnv[] = [];
after(() => {
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

function exited(child: import('node:child_process').ChildProcess): Promise<number | null> {
  return child.exitCode !== null ? Promise.resolve(child.exitCode) : new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

async function run(t: TestEnv, runId: string): Promise<RunInfo | undefined> {
  return (await listRuns(t)).find((r) => r.runId === runId);
}

function events(t: TestEnv, runId: string): Array<{ event: string; payload: Record<string, unknown> }> {
  const spool = new Spool({
    path: path.join(t.home, '.quantilica', 'telemetry_spool.db'),
    logger: memoryLogger(),
    fallbackPath: path.join(t.root, 'fallback.db'),
  });
  try {
    return spool
      .readBatch(100000)
      .filter((e) => e.runId === runId)
      .map((e) => ({ event: e.event, payload: JSON.parse(e.payload) as Record<string, unknown> }));
  } finally {
    spool.close();
  }
}

test(
  "a silent fetcher under stallSeconds is marked stalled (event, stalledSince, status), heartbeats carry the log's last growth; onStall: cancel ends the other stalled",
  { timeout: 120000 },
  async () => {
    const t = makeTestEnv(
      [
        { name: 'silent', pool: 'network-light', argv: [SILENT, '1000'], stallSeconds: 2 },
        { name: 'silent-cancel', pool: 'network-light', argv: [SILENT, '1000'], stallSeconds: 2, onStall: 'cancel' },
      ],
      { QUANTILICA_HEARTBEAT_SECONDS: '0.5' },
    );
    stations.push(t);
    const agent = await startAgent(t);
    try {
      const ids: string[] = [];
      for (const f of ['silent', 'silent-cancel'])
        ids.push((JSON.parse((await runCli(t, ['run', f, '--detach', '--json'])).stdout) as RunInfo).runId);
      const [marked, cancelled] = ids;
      const stalled = await waitFor(
        async () => {
          const r = await run(t, marked);
          return r?.stalledSince ? r : null;
        },
        { what: 'the silent run to be marked stalled', timeoutMs: 30000 },
      );
      assert.equal(stalled.status, 'running', 'marked, not stopped, without onStall: cancel');
      assert.ok(stalled.logGrewAt, 'the run says when its log last grew');
      assert.ok(Date.parse(stalled.stalledSince!) - Date.parse(stalled.logGrewAt) >= 2000, 'stalled after 2 s without growth');
      const status = await runCli(t, ['status']);
      assert.match(status.stdout, /stalled since \d\d:\d\d:\d\d \(no log output since \d\d:\d\d:\d\d\)/);

      const end = await waitFor(
        async () => {
          const r = await run(t, cancelled);
          return r && r.status !== 'running' && r.status !== 'waiting' ? r : null;
        },
        { what: 'the onStall: cancel run to end', timeoutMs: 30000 },
      );
      assert.deepEqual([end.status, end.reason], ['cancelled', 'stalled']);
      assert.deepEqual(groupMembers(end.pid!), []);
      const words = await runCli(t, ['runs']);
      assert.match(words.stdout, /cancelled: stalled \(no log output since \d\d:\d\d:\d\d\)/);

      const cancelRun = await runCli(t, ['cancel', marked]);
      assert.equal(cancelRun.code, 0, cancelRun.stderr);
      agent.child.kill('SIGTERM');
      assert.equal(await exited(agent.child), 0);
      for (const id of ids) {
        const evs = events(t, id);
        const stall = evs.filter((e) => e.event === 'stalled');
        assert.equal(stall.length, 1, `one stalled event for ${id}: ${evs.map((e) => e.event).join(', ')}`);
        assert.ok(typeof stall[0].payload.logGrewAt === 'string');
        const beats = evs.filter((e) => e.event === 'heartbeat');
        assert.ok(
          beats.length > 0 && beats.every((b) => typeof b.payload.logGrewAt === 'string'),
          'each heartbeat says when the log last grew',
        );
      }
    } finally {
      if (agent.child.exitCode === null) agent.child.kill('SIGKILL');
    }
  },
);
