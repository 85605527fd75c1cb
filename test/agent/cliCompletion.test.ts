import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import { after, test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';

const FETCHERS = [
  { name: 'printer', pool: 'network-light' as const, argv: ['/bin/sh', '-c', 'echo printed'] },
  { name: 'parser', pool: 'cpu-analysis' as const, argv: ['/bin/sh', '-c', 'echo parsed'] },
  { name: 'loader', pool: 'heavy-io' as const, argv: ['/bin/sh', '-c', 'echo loaded'] },
];

const stations: TestEnv[] = [];
after(() => {
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

/** What bash offers for the words typed so far (the last one is being completed), through the script `completion bash` prints. */
function offered(t: TestEnv, script: string, words: string[]): string[] {
  const quoted = words.map((w) => `'${w.replace(/'/g, `'\\''`)}'`).join(' ');
  const out = execFileSync(
    'bash',
    ['-c', `${script}\nCOMP_WORDS=(quantilica ${quoted}); COMP_CWORD=${words.length}; _quantilica; printf '%s\\n' "\${COMPREPLY[@]}"`],
    { env: t.env, encoding: 'utf8' },
  );
  return out
    .split('\n')
    .filter((w) => w !== '')
    .sort();
}

test('completion offers option values, subcommands and arguments after any options', async () => {
  const t = makeTestEnv(FETCHERS);
  stations.push(t);
  const agent = await startAgent(t);
  try {
    const ran = await runCli(t, ['run', 'printer', '--json']);
    assert.equal(ran.code, 0, ran.stderr);
    const runId = (JSON.parse(ran.stdout.trim().split('\n').at(-1) ?? '{}') as RunInfo).runId;
    const script = (await runCli(t, ['completion', 'bash'])).stdout;
    const names = ['loader', 'parser', 'printer'];
    const cases: Array<[string[], string[]]> = [
      [
        ['runs', '--status', ''],
        ['cancelled', 'completed', 'failed', 'running', 'skipped', 'waiting'],
      ],
      [['runs', '--status', 'r'], ['running']],
      [
        ['runs', '--limit', '5', '--status', 'c'],
        ['cancelled', 'completed'],
      ],
      [['runs', '--json', '--fetcher', ''], names],
      [['runs', '--fetcher', 'pa'], ['parser']],
      [['runs', '--status', '=', 'fa'], ['failed']],
      [['runs', '--status=fa'], ['--status=failed']],
      [['runs', '--st'], ['--status']],
      [['logs', '-f', 'pr'], ['printer']],
      [['logs', '-n', '5', '--follow', ''], [...names, runId].sort()],
      [
        ['run', '--detach', 'p'],
        ['parser', 'printer'],
      ],
      [['run', '--json', '--detach', 'l'], ['loader']],
      [['cancel', '--fetcher', 'lo'], ['loader']],
      [['cancel', '--no-wait', '--run', runId.slice(0, 4)], [runId]],
      [['schedule', '--json', 'pa'], ['pause']],
      [['schedule', 'resume', 'pr'], ['printer']],
      [
        ['telemetry', 'emit', 'finish', '--status', ''],
        ['cancelled', 'completed', 'failed'],
      ],
      [['telemetry', 'emit', '--run-id', 'x', 'he'], ['heartbeat']],
      [
        ['completion', ''],
        ['bash', 'zsh'],
      ],
      // A fetcher's own arguments and a value with no list offer nothing (bash falls back to files).
      [['run', 'printer', '--', '--status', ''], []],
      [['runs', '--limit', ''], []],
      [['status', '--json', ''], []],
    ];
    for (const [words, expected] of cases) assert.deepEqual(offered(t, script, words), expected, words.join(' '));
    // The helper itself: options among the words reach it as words, and it says nothing on stderr.
    const direct = await runCli(t, ['__complete', '--', '3', 'runs', '--status', 'co']);
    assert.equal(direct.code, 0, direct.stderr);
    assert.equal(direct.stdout, 'completed\n');
    assert.equal(direct.stderr, '');
  } finally {
    agent.child.kill('SIGTERM');
    await new Promise((resolve) => agent.child.once('exit', resolve));
  }
});
