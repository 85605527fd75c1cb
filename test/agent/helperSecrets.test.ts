// No helper process carries the agent's secrets, and a fetcher gets only the descriptors of its run:
// a fetcher reads its parent's /proc/PID/environ and its own environment, and lists its descriptors,
// under the native spawner and under the thread fallback, with every secret set in the agent's
// environment and a descriptor (251) the agent itself inherited.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { DemoSimulator } from '../../agent/github/demoSimulator';
import { connectAgent } from '../../agent/client/agentClient';
import { AGENT_JS, FIXTURES, makeTestEnv, readyAgent, runCli, startAgent, testConfig, type TestEnv } from '../support/harness';
import { memoryLogger } from '../support/memoryLogger';
import { pgStation } from '../support/pgStations';
import { startTestPostgres } from '../support/postgres';
import { waitFor } from '../support/waitFor';

// The pid makes them this test's own: copies of the suite may run at once on one machine.
const SECRETS = {
  GITHUB_TOKEN: `ghp_helpersecret1_${process.pid}`,
  QUANTILICA_DATABASE_URL: 'postgres://quant:dbsecret2@127.0.0.1:1/telemetry',
  QUANTILICA_SLOT_DATABASE_URL: 'postgres://quant:slotsecret3@127.0.0.1:1/slots',
  PGPASSWORD: 'pgsecret4',
};
const LEAK = /helpersecret1|dbsecret2|slotsecret3|pgsecret4/;

// Everything goes to the run's log: a redirection in the fetcher's own shell would add a descriptor.
const PROBE = [
  'echo "parent-exe=$(readlink /proc/$PPID/exe)"',
  'echo "== parent"; tr "\\0" "\\n" < /proc/$PPID/environ && echo parent-environ-read',
  'echo "== own"; env',
  'echo "== fds"; ls /proc/$$/fd; echo "== end"',
].join('; ');

const stations: TestEnv[] = [];
after(() => {
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

/** Starts the agent with `extraFd` open without close-on-exec at descriptor 251, as a careless parent leaves one. */
async function startAgentWithFd(s: TestEnv, extraFd: number): Promise<ChildProcess> {
  // Filled, not sparse: child_process reduces the array, which skips holes, so a sparse stdio[251]
  // would land at descriptor 3.
  const stdio: (number | 'ignore' | 'pipe')[] = ['ignore', 'pipe', 'pipe', ...Array<'ignore'>(248).fill('ignore'), extraFd];
  return (await readyAgent(spawn(process.execPath, [AGENT_JS, 'agent'], { env: s.env, stdio }))).child;
}

function parentOf(pid: string): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}

async function stopAgent(child: ChildProcess): Promise<void> {
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await exited;
}

for (const spawner of ['native', 'thread'] as const) {
  test(
    `${spawner} spawner: a fetcher's parent and own environment hold no secret of the agent, and the fetcher holds descriptors 0-3 only`,
    { timeout: 120_000 },
    async () => {
      const s = makeTestEnv([{ name: 'probe', pool: 'network-light', argv: ['/bin/sh', '-c', PROBE] }], {
        ...SECRETS,
        QUANTILICA_SPAWNER: spawner,
      });
      stations.push(s);
      const inherited = fs.openSync(path.join(s.root, 'inherited.txt'), 'w', 0o600);
      const agent = await startAgentWithFd(s, inherited);
      fs.closeSync(inherited);
      let log: string;
      try {
        assert.equal(
          fs.readlinkSync(`/proc/${agent.pid}/fd/251`),
          path.join(s.root, 'inherited.txt'),
          'the agent holds the inherited descriptor at 251',
        );
        const r = await runCli(s, ['run', 'probe']);
        assert.equal(r.code, 0, r.stderr);
        const logs = fs.readdirSync(path.join(s.dataDir, 'logs')).filter((f) => f.startsWith('probe-'));
        assert.equal(logs.length, 1);
        log = fs.readFileSync(path.join(s.dataDir, 'logs', logs[0]), 'utf8');
        // The spawner lives on with the agent: its own environment is checked too.
        if (spawner === 'native') {
          const helper = fs
            .readdirSync('/proc')
            .filter((p) => /^\d+$/.test(p))
            .find((p) => {
              try {
                return fs.readlinkSync(`/proc/${p}/exe`).endsWith('quantilica-spawner') && parentOf(p) === agent.pid;
              } catch {
                return false;
              }
            });
          assert.ok(helper, 'the native spawner runs');
          assert.equal(fs.readFileSync(`/proc/${helper}/environ`, 'utf8'), '', 'the spawner starts with an empty environment');
        }
      } finally {
        await stopAgent(agent);
      }
      // The run was started by the spawner asked for: the fetcher's parent is the spawner's fork, or the wrapper's shell.
      assert.match(log, spawner === 'native' ? /^parent-exe=\S*quantilica-spawner$/m : /^parent-exe=\S*\/(bash|dash|sh)$/m, log);
      assert.match(log, /^parent-environ-read$/m, "the parent's environment was read");
      assert.match(log, /^QUANTILICA_RUN_ID=/m, "the fetcher's own environment was read");
      assert.doesNotMatch(log, LEAK, "no secret in the parent's or the fetcher's environment");
      for (const name of Object.keys(SECRETS))
        assert.doesNotMatch(log, new RegExp(`^${name}=`, 'm'), `${name} is not in either environment`);
      const fds = (/^== fds\n([\s\S]*?)^== end$/m.exec(log)?.[1] ?? '')
        .split('\n')
        .filter((l) => l !== '')
        .map(Number)
        .sort((a, b) => a - b);
      assert.deepEqual(fds, [0, 1, 2, 3], `the fetcher holds only the log, stdin and the slot (saw ${fds.join(', ')})`);
    },
  );
}

test('the demo GitHub simulator starts with an empty environment', { timeout: 60_000 }, async () => {
  const saved = { ...process.env };
  Object.assign(process.env, SECRETS);
  const sim = new DemoSimulator(memoryLogger());
  try {
    await sim.url();
    const pid = await waitFor(
      () =>
        fs
          .readdirSync('/proc')
          .filter((p) => /^\d+$/.test(p))
          .find((p) => {
            try {
              return fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('githubSimulator.js') && parentOf(p) === process.pid;
            } catch {
              return false;
            }
          }),
      { what: 'the simulator process' },
    );
    assert.equal(fs.readFileSync(`/proc/${pid}/environ`, 'utf8'), '');
  } finally {
    await sim.stop();
    for (const name of Object.keys(SECRETS)) if (!(name in saved)) delete process.env[name];
  }
});

/** Every process whose environment holds `needle`, other than those `allowed` says are the agent's own. */
function holdersOf(needle: string, allowed: (pid: number) => boolean): string[] {
  const found: string[] = [];
  for (const p of fs.readdirSync('/proc').filter((e) => /^\d+$/.test(e))) {
    try {
      if (fs.readFileSync(`/proc/${p}/environ`, 'utf8').includes(needle) && !allowed(Number(p)))
        found.push(`${p} ${fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').replace(/\0/g, ' ')}`);
    } catch {
      /* gone, or not ours to read */
    }
  }
  return found;
}

test(
  'postgres slot backend: the keepers get the slot database URL on a pipe, and no process but the agent carries it in its environment',
  { timeout: 120_000 },
  async () => {
    const db = await startTestPostgres();
    const s = pgStation(
      db.url,
      'station-secrets',
      [{ name: 'until-file', pool: 'heavy-io', argv: [path.join(FIXTURES, 'exitWhenFileExists.sh')] }],
      { GITHUB_TOKEN: SECRETS.GITHUB_TOKEN },
    );
    stations.push(s);
    const agent = await startAgent(s);
    const client = await connectAgent(testConfig(s).connectionFile, { client: 'helper-secrets' });
    const release = path.join(s.root, 'release');
    try {
      const run = await client.run('until-file', [release, '0']);
      await waitFor(async () => (await client.listRuns(10)).find((r) => r.runId === run.runId && r.status === 'running'), {
        what: 'the run to start',
        timeoutMs: 60_000,
      });
      const keepers = fs
        .readdirSync('/proc')
        .filter((p) => /^\d+$/.test(p))
        .filter((p) => {
          try {
            return (
              fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('pgSlotKeeper.js') &&
              fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('station-secrets')
            );
          } catch {
            return false;
          }
        });
      assert.ok(keepers.length >= 1, "the run's slot is held by a keeper");
      for (const k of keepers)
        assert.equal(fs.readFileSync(`/proc/${k}/environ`, 'utf8'), '', `keeper ${k} starts with an empty environment`);
      // The agent itself holds its settings; nothing it started does (the fetcher, its parent, the keepers, the spawner).
      const agentPid = agent.child.pid!;
      for (const needle of [db.url, SECRETS.GITHUB_TOKEN])
        assert.deepEqual(
          holdersOf(needle, (pid) => pid === agentPid),
          [],
          `no helper holds ${needle === db.url ? 'the slot URL' : 'the token'}`,
        );
      fs.writeFileSync(release, '');
      assert.equal((await client.waitRun(run.runId)).status, 'completed');
    } finally {
      fs.writeFileSync(release, '');
      await client.close();
      await stopAgent(agent.child);
      await db.stop();
    }
  },
);
