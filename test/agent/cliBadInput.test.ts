import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { makeTestEnv, runCli } from '../support/harness';

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
