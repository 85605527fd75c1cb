import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { connectAgent, type AgentClient } from '../../agent/client/agentClient';
import { FIXTURES, groupExists, listRuns, runCli, startAgent, testConfig, type FetcherSpec, type TestEnv } from '../support/harness';
import { startTestPostgres } from '../support/postgres';
import { pgStation, SlotObserver } from '../support/pgStations';
import { waitFor } from '../support/waitFor';

// Cancel from any station: `quantilica cancel <run-id>` on station B for a run that station
// A holds a slot for (or queues for one) cancels it on A as a local cancel would, and says so.

const fetchers: FetcherSpec[] = [
  { name: 'until-file', pool: 'heavy-io', argv: [path.join(FIXTURES, 'exitWhenFileExists.sh')] },
  // Ignores SIGTERM (and so do its children): only the grace period's SIGKILL on the group ends it.
  { name: 'stubborn', pool: 'heavy-io', argv: [path.join(FIXTURES, 'stubbornGroup.sh')] },
];

interface Station {
  env: TestEnv;
  agent: Awaited<ReturnType<typeof startAgent>>;
  client: AgentClient;
}

async function waitingForPool(client: AgentClient, runId: string): Promise<void> {
  await waitFor(async () => (await client.listRuns(50)).find((r) => r.runId === runId)?.wait?.kind === 'pool', {
    what: `run ${runId} to wait for a slot`,
    timeoutMs: 30_000,
  });
}

test(
  'cancel from another station: a held run is stopped (SIGTERM, grace, SIGKILL) and frees its slot; a queued one never starts',
  { timeout: 120_000 },
  async () => {
    const db = await startTestPostgres();
    const observer = new SlotObserver(db.url, 'heavy-io');
    const stations: Station[] = [];
    try {
      // A sends its telemetry to the same database: the cancelled run must reach core.task_run.
      const envA = pgStation(db.url, 'station-a', fetchers, {
        CRON_POOL_HEAVY_IO_SLOTS: '1',
        QUANTILICA_CANCEL_GRACE_SECONDS: '1',
        QUANTILICA_DATABASE_URL: db.url,
      });
      const envB = pgStation(db.url, 'station-b', fetchers, { CRON_POOL_HEAVY_IO_SLOTS: '1' });
      for (const env of [envA, envB]) {
        const agent = await startAgent(env);
        stations.push({ env, agent, client: await connectAgent(testConfig(env).connectionFile, { client: 'pg-slot-cancel' }) });
      }
      const [a, b] = stations;
      await observer.start();
      assert.equal((await observer.query<{ slots: number }>("SELECT slots FROM core.pool WHERE name = 'heavy-io'")).rows[0].slots, 1);

      // A holds the one slot with a fetcher that ignores SIGTERM; A queues a second run, then B one.
      const held = await a.client.run('stubborn', []);
      const group = await waitFor(
        async () => {
          const run = (await a.client.listRuns(50)).find((r) => r.runId === held.runId);
          return run?.status === 'running' && run.pid !== null ? run.pid : null;
        },
        { what: 'the held run to run', timeoutMs: 60_000, intervalMs: 50 },
      );
      const queuedOnA = await a.client.run('until-file', [path.join(a.env.root, 'never'), '0']);
      await waitingForPool(a.client, queuedOnA.runId);
      const releaseB = path.join(b.env.root, 'release');
      const waitingOnB = await b.client.run('until-file', [releaseB, '0']);
      await waitingForPool(b.client, waitingOnB.runId);

      // B cancels A's queued run: it ends cancelled on A without ever starting.
      const q = await runCli(b.env, ['cancel', queuedOnA.runId]);
      assert.equal(q.code, 0, q.stderr + q.stdout);
      assert.match(q.stdout, new RegExp(`run ${queuedOnA.runId} until-file cancelled`));
      const queuedEnd = (await listRuns(a.env, ['--limit', '50'])).find((r) => r.runId === queuedOnA.runId);
      assert.equal(queuedEnd?.status, 'cancelled');
      assert.equal(queuedEnd?.reason, 'cancelled');
      assert.equal(queuedEnd?.startedAt, null, 'the queued run never started');
      assert.equal(queuedEnd?.pid, null);
      assert.equal(observer.maxLocks <= 1, true);

      // B cancels A's held run through the protocol's cancel request, as the extension does, and then
      // waits for it with the CLI: SIGTERM is ignored, so it ends by the SIGKILL after the grace.
      const answered = await b.client.cancel({ runId: held.runId });
      assert.equal(answered.length, 1);
      assert.equal(answered[0].runId, held.runId);
      assert.equal(answered[0].status, 'running', 'the answer is the run as A saw it when the cancel began');
      const c = await runCli(b.env, ['cancel', held.runId]);
      assert.equal(c.code, 0, c.stderr + c.stdout);
      assert.match(c.stdout, new RegExp(`run ${held.runId} stubborn (cancelled|already cancelled)`));
      const heldEnd = (await listRuns(a.env, ['--limit', '50'])).find((r) => r.runId === held.runId);
      assert.equal(heldEnd?.status, 'cancelled');
      assert.equal(heldEnd?.signal, 'SIGKILL', 'the group ignored SIGTERM: the grace ended it with SIGKILL');
      assert.equal(groupExists(group), false, 'no process of the cancelled run is left');

      // Its slot is free: B's waiting run takes it and runs.
      await waitFor(async () => (await b.client.listRuns(50)).find((r) => r.runId === waitingOnB.runId)?.status === 'running', {
        what: "B's run to start",
        timeoutMs: 30_000,
      });
      fs.writeFileSync(releaseB, '');
      assert.equal((await b.client.waitRun(waitingOnB.runId)).status, 'completed');
      assert.ok(observer.maxLocks <= 1, `pg_locks showed ${observer.maxLocks} locks of a 1-slot pool`);

      // A cancelled again from B: it has ended, and B says how; a run no station owns is not found (65).
      const again = await runCli(b.env, ['cancel', held.runId]);
      assert.equal(again.code, 0, again.stderr);
      assert.match(again.stdout, new RegExp(`run ${held.runId} stubborn already cancelled`));
      const unknown = await runCli(b.env, ['cancel', 'abcdef-0123abcd']);
      assert.equal(unknown.code, 65, unknown.stderr + unknown.stdout);

      // Telemetry on A: the run's final row says cancelled (after A's flush).
      const flushed = await runCli(a.env, ['flush']);
      assert.equal(flushed.code, 0, flushed.stderr + flushed.stdout);
      const row = (
        await observer.query<{ status: string; signal: string | null }>('SELECT status, signal FROM core.task_run WHERE run_id = $1', [
          held.runId,
        ])
      ).rows[0];
      assert.equal(row?.status, 'cancelled');
      const requests = (
        await observer.query<{ state: string; outcome: string; requested_by: string; station: string }>(
          'SELECT state, outcome, requested_by, station FROM core.run_cancel WHERE run_id = $1 ORDER BY id',
          [held.runId],
        )
      ).rows;
      assert.ok(requests.length >= 1);
      assert.deepEqual(requests[0], { state: 'done', outcome: 'cancelling', requested_by: 'station-b', station: 'station-a' });
    } finally {
      await observer.stop();
      for (const s of stations) {
        await s.client.close().catch(() => {});
        if (s.agent.child.exitCode === null && s.agent.child.signalCode === null) {
          s.agent.child.kill('SIGTERM');
          await new Promise((r) => s.agent.child.once('exit', r));
        }
      }
      await db.stop();
    }
  },
);

test(
  'a cancel whose notification the owner missed is found by its scan; one its stopped agent never answered is withdrawn, not applied later',
  { timeout: 120_000 },
  async () => {
    const db = await startTestPostgres();
    const observer = new SlotObserver(db.url, 'heavy-io');
    const stations: Station[] = [];
    try {
      for (const name of ['station-a', 'station-b']) {
        const env = pgStation(db.url, name, fetchers, { CRON_POOL_HEAVY_IO_SLOTS: '2' });
        const agent = await startAgent(env);
        stations.push({ env, agent, client: await connectAgent(testConfig(env).connectionFile, { client: 'pg-slot-cancel' }) });
      }
      const [a, b] = stations;
      await observer.start();
      const never = path.join(a.env.root, 'never');
      const first = await a.client.run('until-file', [never, '0']);
      const second = await a.client.run('until-file', [never, '0']);
      for (const r of [first, second]) {
        await waitFor(async () => (await a.client.listRuns(50)).find((x) => x.runId === r.runId)?.status === 'running', {
          what: `run ${r.runId} to run`,
          timeoutMs: 60_000,
        });
      }
      const agentPid = a.agent.child.pid!;

      // A's listening session is ended while A is stopped: the NOTIFY of B's request reaches no one.
      process.kill(agentPid, 'SIGSTOP');
      const killed = await observer.query<{ ok: boolean }>(
        "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE application_name = 'quantilica-cancel station-a'",
      );
      assert.deepEqual(
        killed.rows.map((r) => r.ok),
        [true],
      );
      const cancelling = runCli(b.env, ['cancel', first.runId]);
      await waitFor(
        async () =>
          (await observer.query("SELECT 1 FROM core.run_cancel WHERE run_id = $1 AND state = 'pending'", [first.runId])).rowCount === 1,
        { what: "B's request to be recorded", timeoutMs: 30_000 },
      );
      process.kill(agentPid, 'SIGCONT');
      const c = await cancelling;
      assert.equal(c.code, 0, c.stderr + c.stdout);
      assert.match(c.stdout, new RegExp(`run ${first.runId} until-file cancelled`));
      assert.equal((await a.client.waitRun(first.runId)).status, 'cancelled');

      // A stopped for longer than B waits for an answer: B says so (69) and withdraws its request, which
      // A, once it runs again, does not act on.
      process.kill(agentPid, 'SIGSTOP');
      const unanswered = await runCli(b.env, ['cancel', second.runId]);
      process.kill(agentPid, 'SIGCONT');
      assert.equal(unanswered.code, 69, unanswered.stderr + unanswered.stdout);
      assert.match(unanswered.stderr, /did not answer/);
      const row = (
        await observer.query<{ state: string; outcome: string | null }>('SELECT state, outcome FROM core.run_cancel WHERE run_id = $1', [
          second.runId,
        ])
      ).rows;
      assert.deepEqual(row, [{ state: 'no-answer', outcome: null }]);
      // A has run its event loop (the queued notification included) once it answers twice more.
      await a.client.listRuns(50);
      await a.client.listRuns(50);
      assert.equal((await a.client.listRuns(50)).find((x) => x.runId === second.runId)?.status, 'running');
      fs.writeFileSync(never, '');
      assert.equal((await a.client.waitRun(second.runId)).status, 'completed');
    } finally {
      await observer.stop();
      for (const s of stations) {
        await s.client.close().catch(() => {});
        if (s.agent.child.exitCode === null && s.agent.child.signalCode === null) {
          s.agent.child.kill('SIGCONT');
          s.agent.child.kill('SIGTERM');
          await new Promise((r) => s.agent.child.once('exit', r));
        }
      }
      await db.stop();
    }
  },
);
