import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { connectAgent } from '../agent/client/agentClient';
import { migrateGithub } from '../agent/github/store/migrateGithub';
import { PostgresGithubDb } from '../agent/github/store/postgresGithubDb';
import type { RunInfo } from '../shared/protocol';
import { newDatabase } from '../test/support/githubTestBed';
import { makeTestEnv, runCli, startAgent } from '../test/support/harness';
import { memoryLogger } from '../test/support/memoryLogger';
import { startTestPostgres } from '../test/support/postgres';
import { simulatorProcess } from '../test/support/simulatorProcess';
import { percentile, printTable } from './benchSupport';

// The agent's answers while a GitHub sync runs: `status` (a snapshot over the protocol) timed 200
// times, 25 ms apart, while the sync works at concurrency 5 on PostgreSQL against the simulator (80
// repositories, 25 ms per request, its own process), and 20 times with no sync for comparison.
// Target: p99 under 100 ms. (The test githubAgentRun checks only that the agent never stalls.)
// Run: npm run bench -- githubStatus

const CALLS = 200;

async function timed<T>(call: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const started = process.hrtime.bigint();
  const value = await call();
  return { ms: Number(process.hrtime.bigint() - started) / 1e6, value };
}

async function main(): Promise<void> {
  const postgres = await startTestPostgres();
  const sim = await simulatorProcess(['--repos', '80', '--pull-requests', '12', '--runs', '7', '--jobs', '2', '--latency', '25']);
  try {
    const dbUrl = await newDatabase(postgres.url);
    const db = new PostgresGithubDb({ url: dbUrl, logger: memoryLogger() });
    await migrateGithub(db);
    await db.close();
    const t = makeTestEnv([{ name: 'other', pool: 'network-light', argv: ['true'] }], {
      QUANTILICA_DATABASE_URL: dbUrl,
      QUANTILICA_GITHUB_API_URL: sim.url,
      CRON_POOL_NETWORK_LIGHT_SLOTS: '1',
    });
    const catalog = JSON.parse(fs.readFileSync(t.env.QUANTILICA_CATALOG!, 'utf8')) as { fetchers: object[] };
    catalog.fetchers.push({ name: 'github', kind: 'github-sync', pool: 'network-light', repos: sim.repos, concurrency: 5 });
    fs.writeFileSync(t.env.QUANTILICA_CATALOG!, JSON.stringify(catalog));
    const agent = await startAgent(t);
    const client = await connectAgent(path.join(t.home, '.quantilica', 'agent.json'), { client: 'bench' });
    try {
      const idle: number[] = [];
      for (let i = 0; i < 20; i++) idle.push((await timed(() => client.getSnapshot())).ms);
      const started = await runCli(t, ['run', 'github', '--detach', '--json']);
      if (started.code !== 0) throw new Error(started.stderr);
      const runId = (JSON.parse(started.stdout) as RunInfo).runId;
      const during: number[] = [];
      let running = false;
      for (let i = 0; during.length < CALLS && i < CALLS * 20; i++) {
        const { ms, value } = await timed(() => client.getSnapshot());
        const status = value.runs.find((r) => r.runId === runId)?.status;
        if (status === 'running') {
          running = true;
          during.push(ms);
        } else if (running) break;
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      printTable(`githubStatus: status answered during a sync at concurrency 5 (80 repositories; ${during.length} calls while it ran)`, [
        ['status during the sync, p50', `${percentile(during, 50).toFixed(1)} ms`, ''],
        ['status during the sync, p99', `${percentile(during, 99).toFixed(1)} ms`, 'target < 100 ms'],
        ['status during the sync, max', `${Math.max(...during).toFixed(1)} ms`, ''],
        ['status with no sync, p50 / max', `${percentile(idle, 50).toFixed(1)} / ${Math.max(...idle).toFixed(1)} ms`, ''],
      ]);
      const r = (n: number) => Math.round(n * 100) / 100;
      process.stdout.write(
        `${JSON.stringify({ bench: 'githubStatus', calls: during.length, p50Ms: r(percentile(during, 50)), p99Ms: r(percentile(during, 99)), maxMs: r(Math.max(...during)), idleP50Ms: r(percentile(idle, 50)), loadAverage: os.loadavg().map(r) })}\n`,
      );
    } finally {
      await client.close();
      const exited = new Promise((resolve) => agent.child.once('exit', resolve));
      agent.child.kill('SIGTERM');
      await exited;
      fs.rmSync(t.root, { recursive: true, force: true });
    }
  } finally {
    await sim.stop();
    await postgres.stop();
  }
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.stack : String(err));
  process.exitCode = 1;
});
