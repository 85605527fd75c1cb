import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { makeTestEnv, runCli, startAgent } from '../support/harness';

const catalog = [{ name: 'ok', pool: 'network-light' as const, argv: ['true'] }];

/** What a refused command must leave: no runs recorded, no state written. */
function assertNothingRecorded(home: string) {
  assert.equal(fs.existsSync(path.join(home, '.quantilica', 'state.db')), false, 'a refused command wrote run state');
}

test('unknown fetcher names, including names with path characters, are refused with the valid names', async () => {
  const t = makeTestEnv(catalog);
  for (const name of ['nope', '../x', 'a/b', '..']) {
    const r = await runCli(t, ['run', name]);
    assert.equal(r.code, 65, `${name}: ${r.stderr}`);
    assert.match(r.stderr, new RegExp(`unknown fetcher ${JSON.stringify(name).replace(/[./]/g, '\\$&')}; valid names: ok`));
  }
  const runs = await runCli(t, ['runs', '--json']);
  assert.deepEqual(JSON.parse(runs.stdout), { runs: [] });
});

test('a catalog with a path-like name is refused, naming the field', async () => {
  const t = makeTestEnv([{ name: '../evil', pool: 'heavy-io', argv: ['true'] }]);
  const r = await runCli(t, ['status']);
  assert.equal(r.code, 78);
  assert.match(r.stderr, /catalog .*catalog\.json: fetchers\.0\.name: lowercase letters/);
  assertNothingRecorded(t.home);
});

test('bad environment values name the variable, the value and what is allowed', async () => {
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ CRON_POOL_HEAVY_IO_SLOTS: '0' }, /CRON_POOL_HEAVY_IO_SLOTS="0": allowed: from 1 to 256/],
    [{ CRON_USE_POOLS: 'sim' }, /CRON_USE_POOLS="sim": allowed: true, false/],
    [{ CRON_POOL_NETWORK_LIGHT_TIMEOUT: '-5' }, /CRON_POOL_NETWORK_LIGHT_TIMEOUT="-5": allowed: from 1 to/],
    [{ CRON_DISK_PAUSE_GB: '30' }, /CRON_DISK_PAUSE_GB < CRON_DISK_WARN_GB <= CRON_DISK_RESUME_GB/],
    [{ QUANTILICA_DATABASE_URL: 'mysql://x' }, /QUANTILICA_DATABASE_URL="mysql:\/\/x": allowed: a postgres/],
  ];
  for (const [env, message] of cases) {
    const t = makeTestEnv(catalog, env);
    const r = await runCli(t, ['run', 'ok']);
    assert.equal(r.code, 78, `${JSON.stringify(env)}: ${r.stderr}`);
    assert.match(r.stderr, message);
    assertNothingRecorded(t.home);
  }
});

test('an unwritable lock dir or DATA_DIR is a clear error, and nothing is created', async () => {
  for (const setting of ['QUANTILICA_LOCK_DIR', 'DATA_DIR']) {
    const t = makeTestEnv(catalog);
    // A regular file where a directory must be: even root cannot write under it.
    const blocker = path.join(t.root, 'blocker');
    fs.writeFileSync(blocker, '');
    const env = { ...t.env, [setting]: path.join(blocker, 'sub') };
    const r = await runCli(env, ['run', 'ok']);
    assert.equal(r.code, 73, r.stderr);
    assert.match(r.stderr, new RegExp(`${setting}=${blocker}/sub is not a writable directory \\(ENOTDIR`));
    assertNothingRecorded(t.home);
    assert.equal(fs.existsSync(path.join(t.root, 'data')), false, 'DATA_DIR was not created');
  }
});

test('usage errors exit 64', async () => {
  const t = makeTestEnv(catalog);
  assert.equal((await runCli(t, ['run'])).code, 64);
  assert.equal((await runCli(t, ['runs', '--limit', 'many'])).code, 64);
  assert.equal((await runCli(t, ['frobnicate'])).code, 64);
});

/** What a usage error must look like: exit 64, one `quantilica:` message, and nothing done. */
async function assertUsage(t: ReturnType<typeof makeTestEnv>, args: string[], message: RegExp) {
  const r = await runCli(t, args);
  assert.equal(r.code, 64, `${args.join(' ')}: exit ${r.code}; stdout ${r.stdout}; stderr ${r.stderr}`);
  assert.equal(r.stdout, '', `${args.join(' ')} printed nothing on stdout`);
  assert.match(r.stderr, /^quantilica: /, `${args.join(' ')}: ${r.stderr}`);
  assert.match(r.stderr, message, args.join(' '));
}

test('mistyped subcommands and stray arguments exit 64 naming the closest word, and change nothing', async () => {
  const t = makeTestEnv(catalog);
  await assertUsage(t, ['schedule', 'puase', 'ok'], /unknown command 'puase' for 'schedule'; did you mean pause\?/);
  await assertUsage(t, ['schedule', 'resmue'], /did you mean resume\?/);
  await assertUsage(t, ['schedule', 'foo'], /unknown command 'foo' for 'schedule'; allowed: pause, resume/);
  await assertUsage(t, ['schedule', 'pause', 'ok', 'extra'], /'schedule pause' takes at most 1 argument \(fetcher\); unexpected 'extra'/);
  await assertUsage(t, ['status', 'extra'], /'status' takes no arguments; unexpected 'extra'/);
  await assertUsage(t, ['runs', 'extra'], /'runs' takes no arguments; unexpected 'extra'/);
  await assertUsage(t, ['runs', '--limit', '5', 'extra', 'more'], /unexpected 'extra' 'more'/);
  await assertUsage(t, ['statsu'], /unknown command 'statsu'; did you mean status\?/);
  await assertUsage(t, ['frobnicate'], /unknown command 'frobnicate'; allowed: agent, run, /);
  await assertUsage(t, ['service', 'instal'], /did you mean install\?/);
  // Commander's own errors, in the same voice.
  await assertUsage(t, ['runs', '--statsu', 'failed'], /^quantilica: unknown option '--statsu'; did you mean --status\?\n$/);
  await assertUsage(t, ['run'], /^quantilica: missing required argument 'fetcher'\n$/);
  await assertUsage(t, ['telemetry', 'emit', 'finish'], /^quantilica: --run-id: Required; --status: Required\n$/);
  await assertUsage(t, ['telemetry', 'emit', 'bogus'], /^quantilica: unknown event "bogus"; allowed: start, heartbeat, finish\n$/);
  // Nothing was paused, run or recorded.
  assertNothingRecorded(t.home);
  const schedule = await runCli(t, ['schedule', '--json']);
  assert.equal(schedule.code, 0, schedule.stderr);
  const status = (JSON.parse(schedule.stdout) as { schedule: { paused: boolean; entries: Array<{ paused: boolean }> } }).schedule;
  assert.equal(status.paused, false);
  assert.ok(
    status.entries.every((e) => !e.paused),
    'no fetcher was paused',
  );
});

test('through an agent, a fetcher name the protocol cannot carry is an unknown name (65) with the valid names', async () => {
  const t = makeTestEnv(catalog);
  const agent = await startAgent(t);
  try {
    for (const args of [
      ['run', 'Ok'],
      ['run', '../x'],
      ['schedule', 'pause', 'Ok'],
      ['cancel', '--fetcher', 'OK'],
    ]) {
      const r = await runCli(t, args);
      assert.equal(r.code, 65, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, /^quantilica: unknown fetcher ".*"; valid names: ok\n$/, args.join(' '));
      assert.doesNotMatch(r.stderr, /quantilica\/|params/, 'no protocol method or params in the message');
    }
    const r = await runCli(t, ['run', 'nosuch']);
    assert.equal(r.code, 65, r.stderr);
    assert.match(r.stderr, /^quantilica: unknown fetcher "nosuch"; valid names: ok\n$/);
    const runs = await runCli(t, ['runs', '--json']);
    assert.deepEqual(JSON.parse(runs.stdout), { runs: [] });
  } finally {
    agent.child.kill('SIGTERM');
    await new Promise((resolve) => agent.child.once('exit', resolve));
  }
});

/** Every visible command's help, read from the help itself (`schedule pause`, `telemetry emit`, …). */
async function helpTexts(t: ReturnType<typeof makeTestEnv>, prefix: string[] = []): Promise<Array<[string, string]>> {
  const r = await runCli(t, [...prefix, '--help']);
  assert.equal(r.code, 0, `${prefix.join(' ')} --help: ${r.stderr}`);
  const section = /\nCommands:\n([\s\S]*?)(\n\n|$)/.exec(r.stdout)?.[1] ?? '';
  const names = [...section.matchAll(/^ {2}(\S+)/gm)].map((m) => m[1] ?? '').filter((n) => n !== 'help');
  const texts: Array<[string, string]> = [[prefix.join(' '), r.stdout]];
  for (const name of names) texts.push(...(await helpTexts(t, [...prefix, name])));
  return texts;
}

test('--help of every command has no internal words and no default said twice', async () => {
  const t = makeTestEnv(catalog);
  const texts = await helpTexts(t);
  assert.ok(texts.length >= 20, `every command is reached: ${texts.map(([p]) => p).join(', ')}`);
  for (const [command, help] of texts) {
    assert.doesNotMatch(help, /\bADR\b|\bseed\b|\bissue \d|runbook/i, `${command} --help: ${help}`);
    // One option's text, its wrapped lines joined: a default in the words and commander's "(default: …)".
    const entries = help.replace(/\n {10,}/g, ' ').split('\n');
    for (const entry of entries) assert.doesNotMatch(entry, /default[^:][\s\S]*\(default: /, `${command}: ${entry}`);
  }
  const named = await runCli(t, ['help', 'schedule']);
  assert.equal(named.code, 0, named.stderr);
  assert.match(named.stdout, /^Usage: quantilica schedule /);
  const bare = await runCli(t, []);
  assert.equal(bare.code, 64, 'no command at all is a usage error (the help goes to stderr)');
  assert.match(bare.stderr, /^Usage: quantilica/);
});
