import { execFileSync, spawn } from 'node:child_process';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { connectAgent } from '../../agent/client/agentClient';
import { AGENT_JS, listRuns, makeTestEnv, runCli, startAgent } from '../support/harness';
import { waitFor } from '../support/waitFor';

const bash = (script: string) => ['/bin/bash', '-c', script];
const FETCHERS = [
  // Prints three lines, then holds until the test has seen them (the go file), then the rest: the
  // follower's live lines are checked on a signal, not on how long the fetcher happens to run.
  {
    name: 'printer',
    pool: 'network-light' as const,
    argv: bash(
      'for i in $(seq 1 15); do echo "printer line $i"; if [ "$i" = 3 ]; then until [ -e "$DATA_DIR/go" ]; do sleep 0.05; done; fi; sleep 0.05; done',
    ),
  },
  { name: 'failer', pool: 'cpu-analysis' as const, argv: bash('echo "boom"; exit 3') },
  { name: 'quick', pool: 'cpu-analysis' as const, argv: bash('echo ok') },
];

test('logs --follow prints lines while the fetcher runs and exits when it ends; without an agent it reads the file; runs filters; completion lists the catalog', async () => {
  const t = makeTestEnv(FETCHERS);
  fs.mkdirSync(t.dataDir, { recursive: true });
  const agent = await startAgent(t);
  try {
    const queued = await runCli(t, ['run', 'printer', '--detach', '--json']);
    assert.equal(queued.code, 0, queued.stderr);
    const run = JSON.parse(queued.stdout.trim().split('\n').at(-1) ?? '{}') as RunInfo;

    const follower = spawn(process.execPath, [AGENT_JS, 'logs', 'printer', '--follow', '--lines', '100'], {
      env: t.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    follower.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    follower.stderr.on('data', (d: Buffer) => {
      err += d.toString();
    });
    const exited = new Promise<number | null>((resolve) => follower.on('close', (code) => resolve(code)));
    await waitFor(() => /printer line 3\n/.test(out), { what: 'the follower to print the third line', timeoutMs: 20_000 });
    const status = (await listRuns(t)).find((r) => r.runId === run.runId)?.status;
    assert.equal(status, 'running', 'the line arrived while the fetcher was still running');
    fs.writeFileSync(path.join(t.dataDir, 'go'), '');
    const code = await exited;
    assert.equal(code, 0, `the follower exits when the run ends (stderr: ${err})`);
    for (let i = 1; i <= 15; i++)
      assert.equal(out.split('\n').filter((l) => l === `printer line ${i}`).length, 1, `line ${i} exactly once`);
    assert.match(err, /printer · run .* completed --/);

    // The protocol side of following: bounded answers, bad input refused, an ended run says so at once.
    const client = await connectAgent(path.join(t.home, '.quantilica', 'agent.json'), { client: 'cli-operator-test' });
    try {
      await assert.rejects(client.readLog({ runId: run.runId, offset: 0, maxBytes: 1024 * 1024 }), /maxBytes/);
      await assert.rejects(client.readLog({ runId: run.runId, offset: -1 }), /offset/);
      await assert.rejects(client.readLog({ runId: 'zz0000-00000000', offset: 0 }), /no active or recent run/);
      const small = await client.readLog({ runId: run.runId, offset: 0, maxBytes: 10 });
      assert.equal(small.nextOffset, 10);
      assert.equal(small.ended, false, 'more bytes follow');
      const started = Date.now();
      const end = await client.readLog({ runId: run.runId, offset: 1_000_000, waitMs: 20_000 });
      assert.ok(Date.now() - started < 5000, 'an ended run is not held');
      assert.equal(end.ended, true);
      assert.equal(end.status, 'completed');
    } finally {
      await client.close();
    }

    for (const fetcher of ['failer', 'quick', 'failer']) assert.notEqual((await runCli(t, ['run', fetcher])).code, null);
    const failed = await runCli(t, ['runs', '--status', 'failed', '--fetcher', 'failer', '--json']);
    const rows = (JSON.parse(failed.stdout) as { runs: RunInfo[] }).runs;
    assert.equal(rows.length, 2);
    assert.ok(rows.every((r) => r.fetcher === 'failer' && r.status === 'failed'));
    const table = await runCli({ ...t.env, NO_COLOR: '1' }, ['runs', '--since', '1h']);
    assert.match(table.stdout, /^RUN\s+FETCHER\s+POOL\s+STATUS\s+EXIT\s+STARTED\s+DURATION/m);
    assert.match(table.stdout, /printer\s+network-light\s+completed\s+0\s+\d{4}-\d\d-\d\d \d\d:\d\d \S+\s+\d+ s/);
    assert.ok(!table.stdout.includes('\u001b['), 'no colour off a terminal');
    assert.equal((await runCli(t, ['runs', '--status', 'lost'])).code, 64, 'a bad status is a usage error');

    const timers = await runCli(t, ['schedule']);
    assert.match(timers.stdout, /^NEXT\s+IN\s+LAST\s+AGO\s+FETCHER\s+CRON$/m, 'read like systemctl list-timers');
    assert.match(timers.stdout, /^\S.*\s+printer\s/m);

    const script = (await runCli(t, ['completion', 'bash'])).stdout;
    const words = execFileSync(
      'bash',
      ['-c', `${script}\nCOMP_WORDS=(quantilica run ""); COMP_CWORD=2; _quantilica; printf '%s\\n' "\${COMPREPLY[@]}"`],
      { env: t.env, encoding: 'utf8' },
    );
    assert.deepEqual(words.trim().split('\n').sort(), ['failer', 'printer', 'quick']);
    const logsWords = execFileSync(
      'bash',
      ['-c', `${script}\nCOMP_WORDS=(quantilica logs p); COMP_CWORD=2; _quantilica; printf '%s\\n' "\${COMPREPLY[@]}"`],
      { env: t.env, encoding: 'utf8' },
    );
    assert.deepEqual(logsWords.trim().split('\n'), ['printer']);
    const zsh = (await runCli(t, ['completion', 'zsh'])).stdout;
    assert.match(zsh, /^#compdef quantilica/);
    assert.match(zsh, /__complete/);
  } finally {
    fs.writeFileSync(path.join(t.dataDir, 'go'), '');
    agent.child.kill('SIGTERM');
    await new Promise((resolve) => agent.child.once('exit', resolve));
  }
  // No agent: the CLI reads the run store and the log file itself.
  const tail = await runCli(t, ['logs', 'printer', '--lines', '3']);
  assert.equal(tail.code, 0, tail.stderr);
  assert.equal(tail.stdout, 'printer line 13\nprinter line 14\nprinter line 15\n');
  assert.equal((await runCli(t, ['logs', 'nobody'])).code, 65);
});
