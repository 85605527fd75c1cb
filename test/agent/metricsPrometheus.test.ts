// /metrics as Prometheus itself reads it: promtool's lint of the exposition, and a real Prometheus
// server (Debian's package, unpacked, on a loopback port) scraping the agent and answering a query.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { GithubSimulator } from '../../simulator/github/githubSimulator';
import { makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';
import { freePort, prometheusTools, startPrometheus } from '../support/prometheus';
import { waitFor } from '../support/waitFor';

test('/metrics passes promtool check metrics, and a real Prometheus scrapes quantilica_runs_finished_total', async () => {
  const tools = prometheusTools();
  const port = await freePort();
  const t = makeTestEnv(
    [
      { name: 'good', pool: 'network-light', argv: ['/bin/sh', '-c', 'echo collected'] },
      { name: 'bad', pool: 'heavy-io', argv: ['/bin/sh', '-c', 'exit 3'] },
    ],
    { QUANTILICA_METRICS_LISTEN: `127.0.0.1:${port}` },
  );
  const agent = await startAgent(t);
  let prometheus: Awaited<ReturnType<typeof startPrometheus>> | null = null;
  try {
    for (const [fetcher, code] of [
      ['good', 0],
      ['good', 0],
      ['bad', 3],
    ] as const) {
      const r = await runCli(t, ['run', fetcher]);
      assert.equal(r.code, code, r.stderr);
    }
    const res = await fetch(`http://127.0.0.1:${port}/metrics`);
    assert.equal(res.status, 200);
    const text = await res.text();
    for (const name of [
      'quantilica_pool_slots',
      'quantilica_pool_slots_used',
      'quantilica_runs_waiting',
      'quantilica_runs_finished_total',
      'quantilica_run_duration_seconds',
      'quantilica_run_retries_total',
      'quantilica_fetcher_late',
      'quantilica_fetcher_last_success_timestamp_seconds',
      'quantilica_disk_free_bytes',
      'quantilica_disk_gate',
      'quantilica_spool_events',
      'quantilica_spool_oldest_event_age_seconds',
      'quantilica_github_requests_total',
      'quantilica_github_quota_remaining',
      'quantilica_github_hibernations_total',
      'quantilica_agent_info',
    ]) {
      assert.match(text, new RegExp(`^# TYPE ${name} `, 'm'), `${name} is exported`);
    }
    const lint = spawnSync(tools.promtool, ['check', 'metrics'], { input: text, encoding: 'utf8' });
    assert.equal(lint.status, 0, `promtool check metrics: ${lint.stdout}${lint.stderr}`);
    assert.equal(`${lint.stdout}${lint.stderr}`.trim(), '', 'no lint findings');

    const dir = fs.mkdtempSync(path.join(t.root, 'prometheus-'));
    prometheus = await startPrometheus(tools, `127.0.0.1:${port}`, dir);
    const server = prometheus;
    const good = await waitFor(
      async () => {
        const result = await server.query('quantilica_runs_finished_total{fetcher="good",outcome="completed"}');
        return result.length === 1 ? result[0] : null;
      },
      { what: 'Prometheus to scrape the agent', timeoutMs: 60_000, intervalMs: 250 },
    );
    assert.equal(good.value[1], '2');
    assert.equal(good.metric.job, 'quantilica');
    const bad = await server.query('quantilica_runs_finished_total{fetcher="bad"}');
    assert.deepEqual(
      bad.map((r) => [r.metric.outcome, r.value[1]]),
      [['failed', '1']],
    );
    const up = await server.query('up{job="quantilica"}');
    assert.equal(up[0]?.value[1], '1', 'the scrape itself succeeded');
  } finally {
    await prometheus?.stop();
    const exited = new Promise((resolve) => agent.child.once('exit', resolve));
    agent.child.kill('SIGTERM');
    await exited;
  }
});

const sample = (text: string, name: string, labels: string) => {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  return line === undefined ? null : Number(line.slice(line.lastIndexOf(' ') + 1));
};

async function stopAgent(agent: Awaited<ReturnType<typeof startAgent>>): Promise<void> {
  const exited = new Promise((resolve) => agent.child.once('exit', resolve));
  agent.child.kill('SIGTERM');
  await exited;
}

test(
  "quantilica_github_requests_total counts each budget's requests, and a restarted agent goes on from the stored syncs",
  { timeout: 180_000 },
  async () => {
    const sim = new GithubSimulator({ repos: 3, pullRequestsPerRepo: 6, runsPerRepo: 3, jobsPerRun: 1 });
    const url = await sim.start();
    const port = await freePort();
    // The sync's store is the embedded SQLite file (no QUANTILICA_DATABASE_URL): it outlives the agent.
    const t: TestEnv = makeTestEnv([{ name: 'other', pool: 'network-light', argv: ['true'] }], {
      QUANTILICA_METRICS_LISTEN: `127.0.0.1:${port}`,
      QUANTILICA_GITHUB_API_URL: url,
    });
    const catalog = JSON.parse(fs.readFileSync(t.env.QUANTILICA_CATALOG!, 'utf8')) as { fetchers: object[] };
    catalog.fetchers.push({ name: 'github', kind: 'github-sync', pool: 'network-light', repos: sim.repoNames });
    fs.writeFileSync(t.env.QUANTILICA_CATALOG!, JSON.stringify(catalog));
    const served = (resource: 'core' | 'graphql') => sim.served.filter((r) => r.resource === resource).length;
    const requests = async () => {
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      const core = sample(text, 'quantilica_github_requests_total', 'budget="core"');
      const graphql = sample(text, 'quantilica_github_requests_total', 'budget="graphql"');
      return core === null || graphql === null ? null : { core, graphql };
    };
    let agent = await startAgent(t);
    try {
      const first = await runCli(t, ['run', 'github']);
      assert.equal(first.code, 0, first.stderr);
      assert.ok(served('core') > 0 && served('graphql') > 0, 'the sync used both budgets');
      assert.deepEqual(await waitFor(requests, { what: 'the request counts', timeoutMs: 30_000, intervalMs: 50 }), {
        core: served('core'),
        graphql: served('graphql'),
      });

      // A new agent: the counters start from the stored syncs, never from zero (a reset to Prometheus).
      await stopAgent(agent);
      agent = await startAgent(t);
      assert.deepEqual(await waitFor(requests, { what: 'the seeded request counts', timeoutMs: 30_000, intervalMs: 50 }), {
        core: served('core'),
        graphql: served('graphql'),
      });
      const before = served('core') + served('graphql');
      const second = await runCli(t, ['run', 'github']);
      assert.equal(second.code, 0, second.stderr);
      assert.ok(served('core') + served('graphql') > before, 'the second sync asked again');
      assert.deepEqual(await requests(), { core: served('core'), graphql: served('graphql') }, 'both syncs, each request once');
    } finally {
      await stopAgent(agent);
      await sim.stop();
    }
  },
);
