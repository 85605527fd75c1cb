import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import pg from 'pg';
import type { RunInfo, Snapshot } from '../../shared/protocol';
import { connectAgent, type AgentClient } from '../../agent/client/agentClient';
import { TelemetryProxy } from '../fixtures/telemetryProxy';
import { FIXTURES, listRuns, runCli, startAgent, testConfig, type FetcherSpec } from '../support/harness';
import { startTestPostgres } from '../support/postgres';
import { pgStation } from '../support/pgStations';
import { waitFor } from '../support/waitFor';

// The postgres slot backend when its database cannot give a connection: at its max_connections while
// runs are queued, and down when the agent or a CLI starts. Runs wait (and say why); nothing exits 1.

const fetchers: FetcherSpec[] = [{ name: 'heavy', pool: 'heavy-io', argv: [path.join(FIXTURES, 'exitWhenFileExists.sh')] }];

async function waitsFor(client: AgentClient, runIds: string[], cause: 'connection-cap' | 'unreachable'): Promise<RunInfo[]> {
  return waitFor(
    async () => {
      const runs = (await client.listRuns(100)).filter((r) => runIds.includes(r.runId));
      for (const r of runs) assert.equal(r.status, 'waiting', `run ${r.runId} is ${r.status} (${r.reason ?? ''})`);
      return runs.length === runIds.length && runs.every((r) => r.wait?.kind === 'slot-backend' && r.wait.cause === cause) ? runs : null;
    },
    { what: `${runIds.length} runs to wait for the slot database (${cause})`, timeoutMs: 60_000, intervalMs: 50 },
  );
}

test(
  'at max_connections, queued runs wait with the reason connection-cap and all run once connections are free',
  { timeout: 240_000 },
  async () => {
    const db = await startTestPostgres({ maxConnections: 20 });
    const env = pgStation(db.url, 'station-a', fetchers);
    const release = path.join(env.root, 'release');
    fs.writeFileSync(release, ''); // each run ends as soon as it starts: what is tested is that it starts
    const agent = await startAgent(env);
    const client = await connectAgent(testConfig(env).connectionFile, { client: 'pg-slot-cap' });
    const fillers: pg.Client[] = [];
    try {
      // Every connection the server has left, held by the test (a burst of other clients).
      for (let i = 0; i < 40; i++) {
        const c = new pg.Client({ connectionString: db.url });
        c.on('error', () => {});
        try {
          await c.connect();
        } catch (err) {
          assert.equal((err as { code?: string }).code, '53300', `the server refused for its cap, not for ${(err as Error).message}`);
          break;
        }
        fillers.push(c);
      }
      assert.ok(fillers.length > 0 && fillers.length < 40, `${fillers.length} connections filled the server`);

      const runs = await Promise.all(Array.from({ length: 6 }, () => client.run('heavy', [release, '0'])));
      const ids = runs.map((r) => r.runId);
      await waitsFor(client, ids, 'connection-cap');
      const status = await runCli(env, ['status', '--json']);
      assert.equal(status.code, 0, status.stderr);
      assert.equal((JSON.parse(status.stdout) as Snapshot).agent.slotBackend?.state, 'connection-cap');
      // Still waiting after several more tries of the keepers (each backs off up to 2 s): none failed.
      await waitFor(() => (agent.stderr().match(/"cause":"connection-cap"/g)?.length ?? 0) >= 1, {
        what: 'the cap logged',
        timeoutMs: 10_000,
      });
      await waitsFor(client, ids, 'connection-cap');

      await Promise.all(fillers.splice(0).map((c) => c.end()));
      for (const id of ids) {
        const done = await client.waitRun(id);
        assert.equal(done.status, 'completed', `run ${id}: ${done.status} ${done.reason ?? ''}`);
      }
      const after = JSON.parse((await runCli(env, ['status', '--json'])).stdout) as Snapshot;
      assert.equal(after.agent.slotBackend?.state, 'ok');
    } finally {
      await Promise.all(fillers.map((c) => c.end().catch(() => {})));
      await client.close().catch(() => {});
      agent.child.kill('SIGTERM');
      await new Promise((r) => (agent.child.exitCode !== null ? r(null) : agent.child.once('exit', r)));
      await db.stop();
    }
  },
);

test(
  'PostgreSQL down at start: the agent starts degraded and its runs wait; a CLI run exits 69 naming the setting; status answers',
  { timeout: 240_000 },
  async () => {
    const db = await startTestPostgres();
    const proxy = await TelemetryProxy.start(db.url);
    const url = proxy.urlFor(db.url);
    await proxy.down();
    const cli = pgStation(url, 'station-b', fetchers);
    const env = pgStation(url, 'station-a', fetchers);
    const release = path.join(env.root, 'release');
    fs.writeFileSync(release, '');
    let agent: Awaited<ReturnType<typeof startAgent>> | null = null;
    let client: AgentClient | null = null;
    try {
      // No agent: `status` works in-process and says why no slot can be had; `run` refuses at once.
      const status = await runCli(cli, ['status']);
      assert.equal(status.code, 0, status.stderr);
      assert.match(status.stdout, /slot database: UNREACHABLE \(runs wait\) — .*ECONNREFUSED/);
      const run = await runCli(cli, ['run', 'heavy', '--', release, '0']);
      assert.equal(run.code, 69, `${run.stdout}${run.stderr}`);
      assert.match(
        run.stderr,
        /quantilica: the slot database \(QUANTILICA_SLOT_DATABASE_URL\) cannot be reached: .*ECONNREFUSED.*no run was queued/,
      );
      assert.doesNotMatch(run.stderr, new RegExp(new URL(db.url).password), 'the password is never shown');
      assert.deepEqual(await listRuns(cli), [], 'nothing was queued');

      // The agent starts anyway; its runs wait for the database and run once it is back.
      agent = await startAgent(env);
      client = await connectAgent(testConfig(env).connectionFile, { client: 'pg-slot-down' });
      assert.match(agent.stderr(), /slot database unreachable at start/);
      const snapshot = await client.getSnapshot();
      assert.equal(snapshot.agent.slotBackend?.state, 'unreachable');
      const remoteStatus = await runCli(env, ['status']);
      assert.equal(remoteStatus.code, 0, remoteStatus.stderr);
      assert.match(remoteStatus.stdout, /agent: running/);
      assert.match(remoteStatus.stdout, /slot database: UNREACHABLE/);
      const queued = await Promise.all([0, 1].map(() => client!.run('heavy', [release, '0'])));
      await waitsFor(
        client,
        queued.map((r) => r.runId),
        'unreachable',
      );

      await proxy.up();
      for (const r of queued) assert.equal((await client.waitRun(r.runId)).status, 'completed');
      assert.equal((await client.getSnapshot()).agent.slotBackend?.state, 'ok');
      // And a CLI of another station now runs in-process as usual.
      const later = await runCli(cli, ['run', 'heavy', '--', release, '5']);
      assert.equal(later.code, 5, later.stderr);
      // A refused login is no outage to wait out: the setting is wrong (exit 78), the password not shown.
      const wrong = new URL(url);
      wrong.password = 'not-the-password';
      const refused = await runCli(pgStation(wrong.toString(), 'station-c', fetchers), ['status']);
      assert.equal(refused.code, 78, `${refused.stdout}${refused.stderr}`);
      assert.match(refused.stderr, /QUANTILICA_SLOT_DATABASE_URL=.*password authentication failed/);
      assert.doesNotMatch(refused.stderr, /not-the-password/);
    } finally {
      await client?.close().catch(() => {});
      if (agent) {
        agent.child.kill('SIGTERM');
        await new Promise((r) => (agent!.child.exitCode !== null ? r(null) : agent!.child.once('exit', r)));
      }
      await proxy.close();
      await db.stop();
    }
  },
);
