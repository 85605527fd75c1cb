import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import type { RunInfo, Snapshot } from '../../shared/protocol';
import { FIXTURES, listRuns, makeTestEnv, runCli, type TestEnv } from '../support/harness';
import { waitFor } from '../support/waitFor';

// Without an agent, `status` reads the station in its own shell's mode (CRON_USE_POOLS); holders of
// the other mode (a pool run while it thinks serial, the serial lock while it thinks pools) are named.

const UNTIL = path.join(FIXTURES, 'exitWhenFileExists.sh');
const stations: TestEnv[] = [];
const children: ChildProcess[] = [];
after(() => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  for (const s of stations) fs.writeFileSync(path.join(s.root, 'release'), '');
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

function station(): TestEnv {
  const s = makeTestEnv([{ name: 'until-file', pool: 'heavy-io', argv: [UNTIL] }]);
  stations.push(s);
  return s;
}

const withMode = (s: TestEnv, usePools: boolean): TestEnv => ({ ...s, env: { ...s.env, CRON_USE_POOLS: String(usePools) } });

async function status(s: TestEnv): Promise<{ text: string; json: Snapshot }> {
  const text = await runCli(s, ['status']);
  assert.equal(text.code, 0, text.stderr);
  const json = await runCli(s, ['status', '--json']);
  assert.equal(json.code, 0, json.stderr);
  return { text: text.stdout, json: JSON.parse(json.stdout) as Snapshot };
}

test('a CLI in serial mode, with no agent, says a pool run holds a heavy-io slot', { timeout: 90000 }, async () => {
  const s = station();
  const pools = withMode(s, true);
  const started = await runCli(pools, ['run', 'until-file', '--detach', '--json', '--', path.join(s.root, 'release'), '0']);
  assert.equal(started.code, 0, started.stderr);
  const { runId } = JSON.parse(started.stdout) as RunInfo;
  await waitFor(async () => (await listRuns(pools)).find((r) => r.runId === runId)?.status === 'running', {
    what: 'the pool run to start',
    timeoutMs: 30000,
    intervalMs: 100,
  });

  const serial = await status(withMode(s, false));
  assert.equal(serial.json.agent.mode, 'serial');
  const other = serial.json.agent.otherMode;
  assert.ok(other, `--json names the other mode: ${JSON.stringify(serial.json.agent)}`);
  assert.equal(other.mode, 'pools');
  assert.deepEqual(other.runs, [runId]);
  assert.equal(other.lockFiles.length, 1);
  assert.match(other.lockFiles[0], /heavy-io\/slot_\d\.lock$/);
  assert.match(serial.text, /mode: WARNING the pools mode is in use beside this serial view/);
  assert.ok(serial.text.includes(other.lockFiles[0]) && serial.text.includes(runId), serial.text);

  // The same station seen in its own mode: nothing to say.
  const same = await status(pools);
  assert.equal(same.json.agent.otherMode, undefined);
  assert.doesNotMatch(same.text, /mode: WARNING/);

  fs.writeFileSync(path.join(s.root, 'release'), '');
  await waitFor(async () => (await status(withMode(s, false))).json.agent.otherMode === undefined, {
    what: 'the warning to go once the pool run ended',
    timeoutMs: 30000,
    intervalMs: 200,
  });
});

test('a CLI in pools mode, with no agent, says the serial lock is held (a legacy serial cron_fetch.sh)', { timeout: 60000 }, async () => {
  const s = station();
  fs.mkdirSync(s.lockDir, { recursive: true, mode: 0o700 });
  const lockFile = path.join(s.lockDir, 'quantilica_cron_heavy.lock');
  // Created private, as a script with umask 077 does (a 0644 one is another matter: refused).
  fs.writeFileSync(lockFile, '', { mode: 0o600 });
  const legacy = spawn('flock', ['--no-fork', '-x', lockFile, 'sleep', '600'], { stdio: 'ignore' });
  children.push(legacy);
  const pools = withMode(s, true);
  const seen = await waitFor(
    async () => {
      const r = await status(pools);
      return r.json.agent.otherMode ? r : null;
    },
    { what: 'the serial lock to show', timeoutMs: 20000, intervalMs: 100 },
  );
  assert.deepEqual(seen.json.agent.otherMode, { mode: 'serial', lockFiles: [lockFile], runs: [] });
  assert.match(seen.text, /mode: WARNING the serial mode is in use beside this pools view/);
  assert.ok(seen.text.includes(lockFile));
  legacy.kill('SIGKILL');
  await new Promise((resolve) => legacy.once('exit', resolve));
  assert.equal((await status(pools)).json.agent.otherMode, undefined, 'no warning once the lock is free');
});
