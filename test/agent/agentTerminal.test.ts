import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { after, test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { AGENT_JS, makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';
import { waitFor } from '../support/waitFor';

const stations: TestEnv[] = [];
after(() => {
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

const FETCHERS = [
  { name: 'quick', pool: 'network-light' as const, argv: ['/bin/sh', '-c', 'echo done'] },
  { name: 'slow', pool: 'cpu-analysis' as const, argv: ['/bin/sh', '-c', 'sleep 120'] },
];
// A reserve no machine has: the memory budget warning is due on every machine. Without cgroups (the
// machine's are shared by every agent on it), so the "not enforced" warning is due as well.
const OVERCOMMITTED = { QUANTILICA_MEMORY_RESERVE_GB: '100000', QUANTILICA_MEMORY_ENFORCE: 'false' };

/** `quantilica agent` on a pseudo-terminal (util-linux `script`), as `npm start` in a terminal. */
function agentOnTerminal(t: TestEnv, env: NodeJS.ProcessEnv = t.env) {
  const command = [process.execPath, AGENT_JS, 'agent'].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
  const child = spawn('script', ['--quiet', '--return', '--command', command, '/dev/null'], { env, stdio: ['pipe', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (d: Buffer) => {
    output += d.toString().replace(/\r\n/g, '\n');
  });
  child.stderr.on('data', (d: Buffer) => {
    output += d.toString().replace(/\r\n/g, '\n');
  });
  const ended = new Promise<number | null>((resolve) => child.once('exit', resolve));
  const stop = async () => {
    // The agent's pid from its summary (or its JSON ready line): our own child's child.
    const pid = Number(/ready \(pid (\d+)/.exec(output)?.[1] ?? /"pid":(\d+)/.exec(output)?.[1]);
    if (pid > 0) process.kill(pid, 'SIGTERM');
    else child.kill('SIGKILL');
    await ended;
  };
  return { output: () => output, stop };
}

const linesOf = (text: string, pattern: RegExp) => text.split('\n').filter((l) => pattern.test(l));

test(
  'on a terminal the agent writes human lines: the summary apart, one line per run start and end, connections quiet, the memory warning once',
  { timeout: 180_000 },
  async () => {
    const t = makeTestEnv(FETCHERS, { QUANTILICA_LOG_LEVEL: 'info', ...OVERCOMMITTED });
    stations.push(t);
    const agent = agentOnTerminal(t);
    try {
      const summary = await waitFor(() => (agent.output().includes('Ctrl-C stops the agent') ? agent.output() : null), {
        what: 'the summary',
        timeoutMs: 30_000,
        intervalMs: 100,
      });
      assert.doesNotMatch(summary, /"level":|"ready":true/, 'no JSON on a terminal');
      // The summary is a block of its own: a blank line before it and after it.
      assert.match(summary, /\n\nQuantilica agent ready \(pid \d+, 127\.0\.0\.1:\d+\); log times are local \(\S+\)\n {2}pools: /);
      assert.match(summary, /Try, in another terminal:\n {2}\S.* run quick +# a fetcher, through this agent/);
      assert.match(summary, /\n {2}slot locks: .*\n(.*\n)*Ctrl-C stops the agent; .*\n\n/);
      // The budget warning, said once, at start, before the summary.
      assert.equal(linesOf(summary, /MEMORY BUDGET/).length, 1, summary);
      assert.match(summary, /^\d\d:\d\d:\d\d warning: MEMORY BUDGET: the pools' memory ceilings .* exceed this machine's RAM/m);

      const quick = await runCli(t, ['run', 'quick', '--json']);
      assert.equal(quick.code, 0, quick.stderr);
      const quickRun = JSON.parse(quick.stdout.trim().split('\n').at(-1) ?? '{}') as RunInfo;
      const slow = await runCli(t, ['run', 'slow', '--detach', '--json']);
      assert.equal(slow.code, 0, slow.stderr);
      const slowRun = JSON.parse(slow.stdout.trim().split('\n').at(-1) ?? '{}') as RunInfo;
      await waitFor(() => agent.output().includes(`run ${slowRun.runId} slow started`), {
        what: 'the slow run to start',
        timeoutMs: 30_000,
        intervalMs: 100,
      });
      const cancel = await runCli(t, ['cancel', slowRun.runId]);
      assert.equal(cancel.code, 0, cancel.stderr);
      const status = await runCli(t, ['status']);
      assert.match(status.stdout, /^memory: WARNING the pools' memory ceilings/m, 'status shows the budget warning');
      const text = await waitFor(() => (agent.output().includes(`run ${slowRun.runId} slow cancelled`) ? agent.output() : null), {
        what: 'the cancel line',
        timeoutMs: 30_000,
        intervalMs: 100,
      });

      const time = '\\d\\d:\\d\\d:\\d\\d';
      assert.deepEqual(
        linesOf(text, new RegExp(`run ${quickRun.runId} `)).map((l) =>
          l.replace(/^\d\d:\d\d:\d\d /, `HH:MM:SS `).replace(/after \d+ s/, 'after N s'),
        ),
        [
          `HH:MM:SS run ${quickRun.runId} quick started in network-light slot 0 (cli)`,
          `HH:MM:SS run ${quickRun.runId} quick completed, exit 0, after N s`,
        ],
      );
      assert.equal(
        linesOf(text, new RegExp(`^${time} run ${slowRun.runId} slow started in cpu-analysis slot 0 \\(cli\\)$`)).length,
        1,
        text,
      );
      assert.equal(
        linesOf(text, new RegExp(`^${time} run ${slowRun.runId} slow cancelled, (exit \\d+|SIG[A-Z]+), after \\d+ s$`)).length,
        1,
        text,
      );
      // Five CLI calls connected and left: none of that at the default level; and still no JSON.
      assert.doesNotMatch(text, /client connected|client disconnected/);
      assert.doesNotMatch(text, /"level":/);
      assert.equal(linesOf(text, /MEMORY BUDGET/).length, 1, 'the warning is not repeated');
      assert.equal(linesOf(text, /MEMORY CEILINGS ARE NOT ENFORCED \(disabled-by-setting\)/).length, 1, 'nor is the one about enforcement');
      // The CLI calls themselves said nothing about memory.
      for (const r of [quick, slow, cancel, status]) assert.doesNotMatch(r.stderr, /MEMORY/, r.stderr);
    } finally {
      await agent.stop();
    }
  },
);

test('the summary of the demo catalog names one of its fetchers to run and the demo sync', { timeout: 120_000 }, async () => {
  const t = makeTestEnv(null, { QUANTILICA_LOG_LEVEL: 'info' });
  stations.push(t);
  const agent = agentOnTerminal(t);
  try {
    const summary = await waitFor(() => (agent.output().includes('Ctrl-C stops the agent') ? agent.output() : null), {
      what: 'the summary',
      timeoutMs: 30_000,
      intervalMs: 100,
    });
    const named = /\n {2}\S.* run ([a-z0-9.-]+) +# a demo fetcher, through this agent; waits for it\n/.exec(summary)?.[1];
    assert.ok(named, summary);
    const catalog = JSON.parse((await runCli(t, ['status', '--json'])).stdout) as { catalog: Array<{ name: string; kind?: string }> };
    assert.ok(
      catalog.catalog.some((e) => e.name === named && e.kind !== 'github-sync'),
      `${named} is a fetcher of the demo catalog`,
    );
    assert.match(summary, /\n {2}\S.* github sync --wait +# the demo GitHub sync \(a simulated GitHub, no token needed\)\n/);
  } finally {
    await agent.stop();
  }
});

test(
  'off a terminal, or with QUANTILICA_LOG_FORMAT=json, the agent writes JSON lines, a run record per start and end among them',
  { timeout: 120_000 },
  async () => {
    const t = makeTestEnv(FETCHERS, { QUANTILICA_LOG_LEVEL: 'info' });
    stations.push(t);
    const piped = await startAgent(t);
    try {
      const r = await runCli(t, ['run', 'quick', '--json']);
      assert.equal(r.code, 0, r.stderr);
      const run = JSON.parse(r.stdout.trim().split('\n').at(-1) ?? '{}') as RunInfo;
      const records = await waitFor(
        () => {
          const lines = piped
            .stderr()
            .split('\n')
            .filter((l) => l.includes(run.runId))
            .map((l) => JSON.parse(l) as { msg: string; event?: string; runId?: string });
          return lines.length >= 2 ? lines : null;
        },
        { what: 'the run records', timeoutMs: 30_000, intervalMs: 100 },
      );
      assert.deepEqual(
        records.map((l) => [l.event, l.runId, l.msg.replace(/after \d+ s/, 'after N s')]),
        [
          ['run', run.runId, `run ${run.runId} quick started in network-light slot 0 (cli)`],
          ['run', run.runId, `run ${run.runId} quick completed, exit 0, after N s`],
        ],
      );
      assert.ok(
        piped
          .stderr()
          .split('\n')
          .filter((l) => l !== '')
          .every((l) => l.startsWith('{')),
        'every line is JSON',
      );
    } finally {
      piped.child.kill('SIGTERM');
      await new Promise((resolve) => piped.child.once('exit', resolve));
    }

    const json = agentOnTerminal(t, { ...t.env, QUANTILICA_LOG_FORMAT: 'json' });
    try {
      const text = await waitFor(() => (/"msg":"protocol server listening"/.test(json.output()) ? json.output() : null), {
        what: 'a JSON log line on the terminal',
        timeoutMs: 30_000,
        intervalMs: 100,
      });
      assert.doesNotMatch(text, /^\d\d:\d\d:\d\d /m, 'no human lines when JSON is asked for');
    } finally {
      await json.stop();
    }
  },
);

test('a CLI call without an agent says nothing about memory; status shows the warning when asked', async () => {
  const t = makeTestEnv(FETCHERS, OVERCOMMITTED);
  stations.push(t);
  for (const args of [['run', 'quick'], ['runs'], ['schedule'], ['slots']]) {
    const r = await runCli(t, args);
    assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
    assert.equal(r.stderr, '', `${args.join(' ')} wrote nothing on stderr`);
  }
  const status = await runCli(t, ['status']);
  assert.equal(status.code, 0, status.stderr);
  assert.match(
    status.stdout,
    /^memory: WARNING the pools' memory ceilings \(\d+ GB\) plus the reserve \(100000 GB\) exceed this machine's RAM/m,
  );
  assert.match(status.stdout, /^memory: ceilings NOT ENFORCED \(disabled-by-setting\)/m);
  const json = JSON.parse((await runCli(t, ['status', '--json'])).stdout) as { agent: { memory?: { budgetWarning: string | null } } };
  assert.match(json.agent.memory?.budgetWarning ?? '', /exceed this machine's RAM/);
});
