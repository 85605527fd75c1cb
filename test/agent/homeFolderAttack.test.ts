import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { makeTestEnv, runCli } from '../support/harness';
import { createUnprivilegedUser } from '../support/unprivilegedUser';

// QUANTILICA_HOME and its runs folder, where each run's waiter writes the exit status the agent then
// believes: the throwaway user `attacker` makes the home, or owns or opens the runs folder, hoping to
// read the agent's state or to plant what decides how a run ended.
const attacker = createUnprivilegedUser('qthome');
after(() => attacker.remove());

function station() {
  const marker = 'ran';
  const t = makeTestEnv([{ name: 'quick', pool: 'network-light', argv: ['/bin/sh', '-c', `: > "$DATA_DIR/${marker}"`] }]);
  return { t, ran: () => fs.existsSync(path.join(t.dataDir, marker)) };
}

test('a QUANTILICA_HOME another account made is refused at start with the fix; nothing is written in it, nothing runs', async () => {
  const { t, ran } = station();
  const foreign = path.join(t.root, 'shared-home');
  fs.mkdirSync(foreign, { mode: 0o755 });
  fs.chownSync(foreign, attacker.uid, attacker.gid);
  const r = await runCli({ ...t, env: { ...t.env, QUANTILICA_HOME: foreign } }, ['run', 'quick']);
  assert.equal(r.code, 73, r.stderr);
  assert.match(
    r.stderr,
    new RegExp(`QUANTILICA_HOME: ${foreign} is owned by uid ${attacker.uid}, not by you .*read the agent's token.*Fix: `, 's'),
    r.stderr,
  );
  assert.deepEqual(fs.readdirSync(foreign), [], 'nothing of ours was made in it');
  assert.equal(ran(), false, 'the fetcher did not run');
  const st = fs.statSync(foreign);
  assert.deepEqual([st.uid, st.mode & 0o777], [attacker.uid, 0o755], 'nor was it taken over or changed');

  // Every command that keeps something in the home refuses it the same way, before it opens anything
  // there: the run history, and the GitHub sync's SQLite store, which the attacker has planted as an
  // empty file of theirs that anyone may write (the store would be made in it: the attacker would read
  // the sync's state, and forge it).
  const planted = path.join(foreign, 'github_sync.db');
  fs.writeFileSync(planted, '');
  fs.chmodSync(planted, 0o666);
  fs.chownSync(planted, attacker.uid, attacker.gid);
  for (const args of [['runs'], ['github', 'status']]) {
    const other = await runCli({ ...t, env: { ...t.env, QUANTILICA_HOME: foreign } }, args);
    assert.equal(other.code, 73, `${args.join(' ')}: ${other.stderr}`);
    assert.match(other.stderr, new RegExp(`QUANTILICA_HOME: ${foreign} is owned by uid ${attacker.uid}, not by you`), other.stderr);
    assert.deepEqual(fs.readdirSync(foreign), ['github_sync.db'], `${args.join(' ')} made nothing in it`);
    assert.equal(fs.statSync(planted).size, 0, `${args.join(' ')} wrote nothing in the planted store`);
  }
});

test("a runs folder another account can write or owns is refused with the fix; once it is ours alone, the run's status is written there, private", async () => {
  const { t, ran } = station();
  const home = path.join(t.home, '.quantilica');
  const runs = path.join(home, 'runs');
  fs.mkdirSync(runs, { recursive: true, mode: 0o700 });

  fs.chmodSync(runs, 0o777);
  const open = await runCli(t, ['run', 'quick']);
  assert.equal(open.code, 73, open.stderr);
  assert.match(
    open.stderr,
    /QUANTILICA_HOME: .*\/runs is writable by every account \(mode 777\).*plant links.*Fix: chmod 700 -- /s,
    open.stderr,
  );
  assert.equal(ran(), false, 'the fetcher did not run');
  assert.deepEqual(fs.readdirSync(runs), [], 'no status was written there');

  fs.chmodSync(runs, 0o700);
  fs.chownSync(runs, attacker.uid, attacker.gid);
  const owned = await runCli(t, ['run', 'quick']);
  assert.equal(owned.code, 73, owned.stderr);
  assert.match(owned.stderr, new RegExp(`QUANTILICA_HOME: ${runs} is owned by uid ${attacker.uid}, not by you`), owned.stderr);
  assert.equal(ran(), false, 'the fetcher did not run');

  fs.chownSync(runs, process.getuid!(), process.getgid!());
  const ours = await runCli(t, ['run', 'quick']);
  assert.equal(ours.code, 0, ours.stderr);
  assert.equal(ran(), true, 'the fetcher ran');
  const statuses = fs.readdirSync(runs).filter((name) => name.endsWith('.exit'));
  assert.equal(statuses.length, 1, `one exit status: ${statuses.join(', ')}`);
  assert.equal(fs.statSync(path.join(runs, statuses[0])).mode & 0o777, 0o600);
});
