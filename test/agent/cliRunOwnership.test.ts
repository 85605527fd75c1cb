// Who owns a run when no agent does, and what the CLI says.
// - `run --detach` without an agent really starts the fetcher (a detached owner process);
// - a CLI waiting on a run follows it across the agent stopping or dying, and exits with the
//   fetcher's code;
// - `cancel` without an agent cancels a run another CLI process owns;
// - cancelling a finished run, or a fetcher with nothing running, says so and exits 0; a fetcher
//   whose name looks like a run id can be cancelled by name.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import type { RunInfo } from '../../shared/protocol';
import { AGENT_JS, FIXTURES, listRuns, makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';
import { waitFor } from '../support/waitFor';

const stations: TestEnv[] = [];
const children: ChildProcess[] = [];
after(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  // Fetchers that outlived a failed test end by themselves once their release file exists; only
  // then is the station removed (they poll a file inside it).
  for (const s of stations) {
    fs.writeFileSync(path.join(s.root, 'never'), '');
    fs.writeFileSync(path.join(s.root, 'release'), '');
  }
  const stationProcesses = () =>
    fs
      .readdirSync('/proc')
      .filter((p) => /^\d+$/.test(p))
      .filter((p) => {
        try {
          const cmdline = fs.readFileSync(`/proc/${p}/cmdline`, 'utf8');
          return stations.some((s) => cmdline.includes(s.root));
        } catch {
          return false;
        }
      });
  await waitFor(() => stationProcesses().length === 0, { what: "the stations' fetchers to end", timeoutMs: 20_000, intervalMs: 100 }).catch(
    () => undefined,
  );
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

const UNTIL = path.join(FIXTURES, 'exitWhenFileExists.sh');
function station(): TestEnv {
  const s = makeTestEnv([
    { name: 'until-file', pool: 'network-light', argv: [UNTIL] },
    { name: 'marker', pool: 'network-light', argv: ['/bin/sh', '-c', 'echo ran > "$DATA_DIR/marker.out"'] },
    // A fetcher whose name has the shape of a run id.
    { name: 'abcdef-0123abcd', pool: 'network-light', argv: [UNTIL] },
  ]);
  stations.push(s);
  return s;
}

/** A CLI process whose stdout is read as it comes, and its end. */
function startCli(s: TestEnv, args: string[]) {
  const child = spawn(process.execPath, [AGENT_JS, ...args], { env: s.env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => {
    stdout += d.toString();
  });
  child.stderr.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const ended = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    ended,
    stdout: () => stdout,
    stderr: () => stderr,
    runId: () =>
      waitFor(() => /^run (\S+) /m.exec(stdout)?.[1], { what: `the run id from quantilica ${args.join(' ')}`, timeoutMs: 30_000 }),
  };
}

test('run --detach without an agent starts the fetcher and returns', async () => {
  const s = station();
  const r = await runCli(s, ['run', 'marker', '--detach', '--json']);
  assert.equal(r.code, 0, r.stderr);
  const run = JSON.parse(r.stdout) as RunInfo;
  await waitFor(() => fs.existsSync(path.join(s.dataDir, 'marker.out')), { what: 'the detached fetcher to run', timeoutMs: 30_000 });
  const done = await waitFor(async () => (await listRuns(s)).find((x) => x.runId === run.runId && x.status === 'completed'), {
    what: 'the detached run to be recorded completed',
    timeoutMs: 30_000,
    intervalMs: 200,
  });
  assert.equal(done.exitCode, 0);
});

for (const how of ['SIGTERM', 'SIGKILL'] as const) {
  test(`a CLI waiting on a run follows it when the agent gets ${how}, and exits with the fetcher's code`, async () => {
    const s = station();
    const agent = await startAgent(s);
    const release = path.join(s.root, 'release');
    const waiting = startCli(s, ['run', 'until-file', '--', release, '9']);
    const runId = await waiting.runId();
    await waitFor(async () => (await listRuns(s)).find((x) => x.runId === runId && x.status === 'running'), {
      what: 'the run to start',
      timeoutMs: 30_000,
      intervalMs: 200,
    });
    const gone = new Promise((resolve) => agent.child.once('exit', resolve));
    agent.child.kill(how);
    await gone;
    fs.writeFileSync(release, '');
    assert.equal(await waiting.ended, 9, `${waiting.stdout()} ${waiting.stderr()}`);
    assert.match(waiting.stdout(), new RegExp(`run ${runId} failed exit 9`));
  });
}

test('cancel without an agent cancels a run that another CLI process owns', async () => {
  const s = station();
  const owner = startCli(s, ['run', 'until-file', '--', path.join(s.root, 'never'), '0']);
  const runId = await owner.runId();
  await waitFor(async () => (await listRuns(s)).find((x) => x.runId === runId && x.status === 'running'), {
    what: 'the run to start',
    timeoutMs: 30_000,
    intervalMs: 200,
  });
  const r = await runCli(s, ['cancel', runId]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, new RegExp(`run ${runId} until-file cancelled`));
  assert.equal(await owner.ended, 80, 'the owner reports the cancel');
});

test('cancel of a finished run or of a fetcher with nothing running says so and exits 0; unknown names exit 65', async () => {
  const s = station();
  const done = await runCli(s, ['run', 'marker', '--json']);
  assert.equal(done.code, 0, done.stderr);
  const runId = (JSON.parse(done.stdout) as RunInfo).runId;
  const byId = await runCli(s, ['cancel', runId]);
  assert.equal(byId.code, 0, byId.stderr);
  assert.match(byId.stdout, new RegExp(`run ${runId} marker already completed`));
  const byName = await runCli(s, ['cancel', 'marker']);
  assert.equal(byName.code, 0, byName.stderr);
  assert.match(byName.stdout, /no active run of marker; nothing to cancel/);
  assert.equal((await runCli(s, ['cancel', 'no-such-fetcher'])).code, 65);
  assert.equal((await runCli(s, ['cancel', 'zzzzzz-00000000'])).code, 65);
});

test('a fetcher whose name looks like a run id is cancelled by name', async () => {
  const s = station();
  for (const args of [
    ['cancel', 'abcdef-0123abcd'],
    ['cancel', '--fetcher', 'abcdef-0123abcd'],
  ]) {
    const owner = startCli(s, ['run', 'abcdef-0123abcd', '--', path.join(s.root, 'never'), '0']);
    const runId = await owner.runId();
    await waitFor(async () => (await listRuns(s)).find((x) => x.runId === runId && x.status === 'running'), {
      what: 'the run to start',
      timeoutMs: 30_000,
      intervalMs: 200,
    });
    const r = await runCli(s, args);
    assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stdout, new RegExp(`run ${runId} abcdef-0123abcd cancelled`));
    assert.equal(await owner.ended, 80);
  }
});
