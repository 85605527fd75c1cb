import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { removeAtExit } from '../support/removeAtExit';

// The benchmarks as an operator starts them (`node out/bench/<name>.js`): a setting that is not a
// number in its range stops them at once with one line that names it, before anything is made.
const BENCH = path.resolve(__dirname, '..', '..', 'bench');

function runBench(name: string, args: string[], env: Record<string, string>) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-bench-settings-'));
  removeAtExit(tmp);
  const r = spawnSync(process.execPath, [path.join(BENCH, `${name}.js`), ...args], {
    env: { ...process.env, TMPDIR: tmp, ...env },
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, made: fs.readdirSync(tmp) };
}

const CASES: Array<{ bench: string; args?: string[]; env?: Record<string, string>; message: string }> = [
  { bench: 'slots', env: { BENCH_WARM_ROUNDS: '0' }, message: 'BENCH_WARM_ROUNDS must be a whole number from 1 to 20, not "0"' },
  { bench: 'slots', env: { BENCH_WARM_ROUNDS: '2.5' }, message: 'BENCH_WARM_ROUNDS must be a whole number from 1 to 20, not "2.5"' },
  { bench: 'slots', env: { BENCH_IDLE_SECONDS: 'ten' }, message: 'BENCH_IDLE_SECONDS must be a number from 0 to 3600, not "ten"' },
  { bench: 'slots', args: ['1e3x'], message: 'the count of runs must be a whole number from 1 to 1000000, not "1e3x"' },
  { bench: 'pgSlots', args: ['-5'], message: 'the count of rounds must be a whole number from 1 to 100000, not "-5"' },
  { bench: 'github', env: { GITHUB_BENCH_SCALE: '0' }, message: 'GITHUB_BENCH_SCALE must be a number from 0.1 to 100, not "0"' },
  { bench: 'slotsPolicies', args: ['0'], message: 'the count of runs must be a whole number from 1 to 1000000, not "0"' },
  { bench: 'protocol', args: ['many'], message: 'the count of transitions must be a whole number from 1 to 100000, not "many"' },
  { bench: 'memory', args: ['12.5'], message: 'the count of runs must be a whole number from 1 to 1000000, not "12.5"' },
  { bench: 'metrics', args: ['100', '-1'], message: 'the count of ended runs kept must be a whole number from 0 to 10000000, not "-1"' },
  { bench: 'pgSlotsThroughput', args: ['NaN'], message: 'the count of runs must be a whole number from 1 to 1000000, not "NaN"' },
];

for (const c of CASES) {
  test(`${c.bench} ${JSON.stringify(c.args ?? [])} ${JSON.stringify(c.env ?? {})}: refused with one line, exit 64, nothing made`, () => {
    const r = runBench(c.bench, c.args ?? [], c.env ?? {});
    assert.equal(r.status, 64, r.stderr);
    assert.equal(r.stderr, `${c.message}\n`);
    assert.equal(r.stdout, '');
    assert.deepEqual(r.made, [], 'nothing made in the temp folder');
  });
}
