// What the agent and the CLI write is private to their user (QUANTILICA_HOME 0700,
// umask 077), fetchers do not inherit the agent's secrets unless their entry asks by name, the data a
// fetcher writes keeps the user's own umask, a password in a setting is never echoed, and a client's
// extra arguments pass only where the catalog allows them.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import { makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';
import { createUnprivilegedUser, type UnprivilegedUser } from '../support/unprivilegedUser';

const DUMP = 'env > "$DATA_DIR/$QUANTILICA_FETCHER.env"; echo data > "$DATA_DIR/$QUANTILICA_FETCHER.data"';
let s: TestEnv;
let user: UnprivilegedUser;

before(() => {
  s = makeTestEnv(
    [
      { name: 'dump', pool: 'network-light', argv: ['/bin/sh', '-c', DUMP] },
      { name: 'dump-pass', pool: 'network-light', argv: ['/bin/sh', '-c', DUMP], passEnv: ['GITHUB_TOKEN'] },
      { name: 'noargs', pool: 'network-light', argv: ['/bin/true'], extraArgs: false },
      { name: 'years', pool: 'network-light', argv: ['/bin/true'], extraArgs: '[0-9]{4}' },
    ],
    {
      // Reachable by nobody: the flush fails quietly; what matters is who sees the URL.
      QUANTILICA_DATABASE_URL: 'postgres://quant:hunter2secret@127.0.0.1:1/telemetry',
      GITHUB_TOKEN: 'ghp_notforfetchers',
    },
  );
  // Only the agent's own modes protect its files: the station's folders are open to everyone.
  fs.chmodSync(s.root, 0o755);
  fs.chmodSync(s.home, 0o755);
  fs.mkdirSync(path.join(s.home, '.quantilica'), { mode: 0o755 });
  fs.chmodSync(path.join(s.home, '.quantilica'), 0o755);
  user = createUnprivilegedUser('qpriv');
});

after(() => {
  user.remove();
  fs.rmSync(s.root, { recursive: true, force: true });
});

const mode = (file: string) => fs.statSync(file).mode & 0o777;

function readableByOther(file: string): Promise<boolean> {
  return new Promise((resolve) => {
    const child = user.spawn('/bin/cat', [file], { stdio: 'ignore' });
    child.once('exit', (code) => resolve(code === 0));
  });
}

test("the agent's home, state, spool, connection file and run logs are private; the fetcher's data keeps the user's umask", async () => {
  const agent = await startAgent(s);
  try {
    const r = await runCli(s, ['run', 'dump']);
    assert.equal(r.code, 0, r.stderr);
  } finally {
    const exited = new Promise((resolve) => agent.child.once('exit', resolve));
    agent.child.kill('SIGTERM');
    await exited;
  }
  const home = path.join(s.home, '.quantilica');
  assert.equal(mode(home), 0o700, 'QUANTILICA_HOME was made 0700');
  const runLogs = fs.readdirSync(path.join(s.dataDir, 'logs')).map((f) => path.join(s.dataDir, 'logs', f));
  assert.ok(runLogs.length > 0);
  // The run state lives in the spool's database (one transaction holds a move and its event).
  for (const file of [path.join(home, 'telemetry_spool.db'), ...runLogs]) {
    assert.equal(mode(file) & 0o077, 0, `${file} is private (mode ${mode(file).toString(8)})`);
  }
  for (const file of [path.join(home, 'telemetry_spool.db'), ...runLogs])
    assert.equal(await readableByOther(file), false, `another user cannot read ${file}`);
  const umask = process.umask();
  assert.equal(mode(path.join(s.dataDir, 'dump.data')), 0o666 & ~umask, 'the fetcher wrote with the umask the agent was started with');
});

test('fetchers get no agent secret unless their entry names it in passEnv', async () => {
  for (const name of ['dump', 'dump-pass']) {
    const r = await runCli(s, ['run', name]);
    assert.equal(r.code, 0, r.stderr);
  }
  const plain = fs.readFileSync(path.join(s.dataDir, 'dump.env'), 'utf8');
  assert.doesNotMatch(plain, /hunter2secret|QUANTILICA_DATABASE_URL/);
  assert.doesNotMatch(plain, /ghp_notforfetchers/);
  const passed = fs.readFileSync(path.join(s.dataDir, 'dump-pass.env'), 'utf8');
  assert.match(passed, /^GITHUB_TOKEN=ghp_notforfetchers$/m, 'passEnv brings the named secret');
  assert.doesNotMatch(passed, /hunter2secret/, 'and only that one');
});

test('a bad database URL is refused with exit 78 without echoing its password', async () => {
  for (const url of ['postgres://quant:hunter2secret@@@/??', 'postgres://%%%:hunter2secret@@@/??', 'postgres://quant:hunter2secret@/db']) {
    const r = await runCli({ ...s.env, QUANTILICA_DATABASE_URL: url }, ['status']);
    assert.equal(r.code, 78, `${url}: ${r.stderr}`);
    assert.match(r.stderr, /QUANTILICA_DATABASE_URL/);
    assert.doesNotMatch(r.stderr + r.stdout, /hunter2secret/);
  }
});

test('extra arguments pass only where the catalog allows them', async () => {
  const none = await runCli(s, ['run', 'noargs', '--', 'x']);
  assert.equal(none.code, 64, none.stderr);
  assert.match(none.stderr, /takes no extra arguments/);
  assert.equal((await runCli(s, ['run', 'years', '--', '2024'])).code, 0);
  const bad = await runCli(s, ['run', 'years', '--', '2024;rm']);
  assert.equal(bad.code, 64, bad.stderr);
  assert.match(bad.stderr, /does not match its catalog pattern/);
});
