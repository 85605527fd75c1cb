import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as readline from 'node:readline';
import { after, test } from 'node:test';
import { connectAgent } from '../../agent/client/agentClient';
import { readConnectionFile } from '../../shared/node/connectionFile';
import type { RunInfo } from '../../shared/protocol';
import { listRuns, makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';
import { createUnprivilegedUser, type UnprivilegedUser } from '../support/unprivilegedUser';
import { waitFor } from '../support/waitFor';

// Another account cannot lock the operator out of the agent by holding unauthenticated sockets:
// its connections are closed at accept (their account read from /proc/net/tcp) without counting
// against the owner's pending cap, and the operator's CLI never works in-process beside a live agent.

const stations: TestEnv[] = [];
const users: UnprivilegedUser[] = [];
const attackers: ChildProcess[] = [];
after(async () => {
  const live = attackers.filter((a) => a.exitCode === null && a.signalCode === null);
  const exited = live.map((a) => new Promise((resolve) => a.once('exit', resolve)));
  for (const a of live) a.kill('SIGKILL');
  await Promise.all(exited);
  for (const u of users) u.remove();
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

// The other account: keeps `count` sockets open to the port, opening a new one 250 ms after one is
// closed; prints the total of connections the kernel accepted, as it grows.
const ATTACK = `
const net = require('node:net');
const [port, count] = process.argv.slice(1).map(Number);
let connected = 0;
const open = () => {
  const s = net.connect(port, '127.0.0.1');
  s.on('connect', () => { connected++; console.log('connected ' + connected); });
  s.on('error', () => undefined);
  s.on('close', () => setTimeout(open, 250));
};
for (let i = 0; i < count; i++) open();
`;

function startAttack(user: UnprivilegedUser, port: number, count: number): { child: ChildProcess; connected: () => number } {
  const child = user.spawn(process.execPath, ['-e', ATTACK, String(port), String(count)], { stdio: ['ignore', 'pipe', 'inherit'] });
  attackers.push(child);
  let connected = 0;
  readline.createInterface({ input: child.stdout! }).on('line', (line) => {
    const m = /^connected (\d+)$/.exec(line);
    if (m) connected = Number(m[1]);
  });
  return { child, connected: () => connected };
}

test(
  "another account holding 100 sockets: the operator's CLI (status, run) goes through the agent and a protocol client connects",
  { timeout: 120000 },
  async () => {
    const t = makeTestEnv([{ name: 'quick', pool: 'network-light', argv: ['/bin/true'] }], { QUANTILICA_LOG_LEVEL: 'info' });
    stations.push(t);
    const user = createUnprivilegedUser('qtsock');
    users.push(user);
    const agent = await startAgent(t);
    const connectionFile = path.join(t.home, '.quantilica', 'agent.json');
    const { port } = await readConnectionFile(connectionFile);
    const attack = startAttack(user, port, 100);
    try {
      // Well past the pending cap (64): every one of them accepted by the kernel and closed by the agent.
      await waitFor(() => attack.connected() >= 300, {
        what: 'the other account to have opened 300 connections',
        timeoutMs: 60000,
        intervalMs: 50,
      });

      const status = await runCli(t, ['status']);
      assert.equal(status.code, 0, status.stderr);
      assert.match(status.stdout, new RegExp(`^agent: running, pid ${agent.child.pid}`), `status is the agent's: ${status.stdout}`);

      // The extension's path: the same WebSocket handshake.
      const client = await connectAgent(connectionFile, { client: 'beside-the-flood' });
      try {
        const seen: string[] = [];
        client.onChanged((event) => {
          if (event.kind === 'change' && event.params.change.kind === 'run') seen.push(event.params.change.run.runId);
        });
        const run = await runCli(t, ['run', 'quick', '--json']);
        assert.equal(run.code, 0, run.stderr);
        const { runId, status: ended } = JSON.parse(run.stdout) as RunInfo;
        assert.equal(ended, 'completed');
        await waitFor(() => seen.includes(runId), {
          what: "the agent to publish the CLI's run (it ran there, not in-process)",
          timeoutMs: 10000,
        });
      } finally {
        await client.close();
      }
      assert.ok(attack.connected() >= 300);
    } finally {
      attack.child.kill('SIGKILL');
      const exited = new Promise((resolve) => agent.child.once('exit', resolve));
      agent.child.kill('SIGTERM');
      await exited;
    }
    const lines = agent
      .stderr()
      .split('\n')
      .filter((l) => l.includes('closed connections of other accounts'));
    assert.ok(lines.length >= 1, `the other account's connections are logged: ${agent.stderr().slice(-2000)}`);
    // Once a minute at most (the last one at the stop): a few lines for thousands of connections.
    assert.ok(lines.length <= 3, `${lines.length} lines`);
    const counted = lines
      .map((l) => (JSON.parse(l) as { refused: Record<string, number> }).refused['other-account'] ?? 0)
      .reduce((a, b) => a + b, 0);
    assert.ok(counted >= 300, `counted ${counted}`);
    assert.doesNotMatch(agent.stderr(), /too-many-pending/, "the owner's pending cap never filled");
  },
);

test(
  'with the agent alive but not answering, the CLI tries again, then exits 69 saying why; never in-process',
  { timeout: 120000 },
  async () => {
    const t = makeTestEnv([{ name: 'quick', pool: 'network-light', argv: ['/bin/true'] }]);
    stations.push(t);
    const agent = await startAgent(t);
    const pid = agent.child.pid!;
    agent.child.kill('SIGSTOP');
    try {
      const status = await runCli(t, ['status']);
      assert.equal(status.code, 69, `${status.stdout}\n${status.stderr}`);
      assert.match(
        status.stderr,
        new RegExp(`^quantilica: the agent is running \\(pid ${pid} holds .*agent\\.flock\\) but did not answer within \\d+ s`, 'm'),
      );
      assert.doesNotMatch(status.stdout, /not running/);
      const run = await runCli(t, ['run', 'quick']);
      assert.equal(run.code, 69, run.stderr);
      assert.equal((await runCli({ ...t.env }, ['--version'])).code, 0);
    } finally {
      agent.child.kill('SIGCONT');
    }
    // Nothing ran in-process meanwhile: the agent, answering again, has no run of `quick`.
    assert.deepEqual(
      (await listRuns(t)).filter((r) => r.fetcher === 'quick'),
      [],
    );
    const exited = new Promise((resolve) => agent.child.once('exit', resolve));
    agent.child.kill('SIGTERM');
    await exited;
    // With no agent at all, the CLI works in-process at once.
    const alone = await runCli(t, ['status']);
    assert.equal(alone.code, 0, alone.stderr);
    assert.match(alone.stdout, /^agent: not running/);
  },
);
