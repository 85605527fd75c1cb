import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { connectAgent } from '../../agent/client/agentClient';
import { readProcInfo } from '../../shared/node/procInfo';
import { AGENT_JS, makeTestEnv, runCli, startAgent, testConfig, type TestEnv } from '../support/harness';
import { waitFor } from '../support/waitFor';

// Attacks by another local account against the lock folder. CI runs as root, the victim here; the
// attacker is a throwaway unprivileged user (unique per run of this file), acting through setpriv.
const USER = `qatks${process.pid}`;
const GROUP = `qatksg${process.pid}`;
let uid = 0;
let gid = 0;
let shareGid = 0;
/** A private /tmp: root-owned, sticky, world-writable, so the attacker can reach it as it reaches /tmp. */
let sticky = '';

before(() => {
  execFileSync('groupadd', [GROUP]);
  execFileSync('useradd', ['-M', '-N', '-s', '/bin/sh', USER]);
  uid = Number(execFileSync('id', ['-u', USER], { encoding: 'utf8' }));
  gid = Number(execFileSync('id', ['-g', USER], { encoding: 'utf8' }));
  shareGid = Number(/^[^:]+:[^:]*:(\d+):/m.exec(execFileSync('getent', ['group', GROUP], { encoding: 'utf8' }))![1]);
  sticky = fs.mkdtempSync('/tmp/qt-sticky-');
  fs.chmodSync(sticky, 0o1777);
});

after(() => {
  spawnSync('pkill', ['-KILL', '-u', USER]);
  spawnSync('userdel', [USER]);
  spawnSync('groupdel', [GROUP]);
  fs.rmSync(sticky, { recursive: true, force: true });
});

/** Runs a shell command as the attacker (optionally a member of the sharing group). */
function asAttacker(cmd: string, opts: { member?: boolean } = {}): { status: number | null; out: string } {
  const groups = opts.member ? ['--groups', String(shareGid)] : ['--clear-groups'];
  const r = spawnSync('setpriv', ['--reuid', String(uid), '--regid', String(gid), ...groups, 'sh', '-c', cmd], {
    encoding: 'utf8',
    cwd: '/',
  });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

function spawnAsAttacker(cmd: string, opts: { member?: boolean } = {}): ChildProcess {
  const groups = opts.member ? ['--groups', String(shareGid)] : ['--clear-groups'];
  return spawn('setpriv', ['--reuid', String(uid), '--regid', String(gid), ...groups, 'sh', '-c', cmd], { stdio: 'ignore', cwd: '/' });
}

/** A file of the victim that an attacker would like to overwrite, and its state to compare later. */
function victimFile(t: TestEnv): { file: string; unchanged(): void } {
  const file = path.join(t.home, '.ssh', 'authorized_keys');
  fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  fs.writeFileSync(file, 'ssh-ed25519 AAAA victim\n', { mode: 0o600 });
  const before = fs.statSync(file);
  return {
    file,
    unchanged: () => {
      const now = fs.statSync(file);
      assert.equal(fs.readFileSync(file, 'utf8'), 'ssh-ed25519 AAAA victim\n', 'the victim file keeps its content');
      assert.equal(now.mtimeMs, before.mtimeMs, 'the victim file was not written');
      assert.equal(now.size, before.size);
    },
  };
}

const catalog = [
  { name: 'heavy', pool: 'heavy-io' as const, argv: ['sleep', '600'] },
  { name: 'cpu', pool: 'cpu-analysis' as const, argv: ['sleep', '600'] },
  { name: 'quick', pool: 'heavy-io' as const, argv: ['true'] },
];

/** Starts `quantilica agent` expecting it to refuse; resolves with its exit code and stderr. */
function agentRefusal(t: TestEnv): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [AGENT_JS, 'agent'], { env: t.env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the agent did not stop: ${stderr}`));
    }, 30000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr });
    });
  });
}

test(
  "a lock folder made first by another account, full of links to the victim's files, is refused by the CLI and the agent; nothing is written",
  { timeout: 120000 },
  async () => {
    const lockDir = path.join(sticky, 'planted_locks');
    const t = makeTestEnv(catalog, {}, { lockDir });
    const target = victimFile(t);
    const planted = asAttacker(
      `mkdir -m 777 ${lockDir} ${lockDir}/heavy-io && ln -s ${target.file} ${lockDir}/heavy-io/slot_0.lock && ln -s ${target.file} ${lockDir}/quantilica_cron_heavy.lock && ln -s ${target.file} ${lockDir}/.quantilica-write-test-1`,
    );
    assert.equal(planted.status, 0, planted.out);
    for (const env of [t.env, { ...t.env, CRON_USE_POOLS: 'false' }]) {
      const r = await runCli(env, ['run', 'quick']);
      assert.equal(r.code, 73, r.stderr);
      assert.match(r.stderr, new RegExp(`QUANTILICA_LOCK_DIR: ${lockDir} is owned by uid ${uid}, not by you \\(uid 0\\)`));
      assert.match(r.stderr, /unsafe: another account could replace the slot files with links/);
      assert.match(r.stderr, new RegExp(`Fix: sudo rm -rf -- '${lockDir}'`));
    }
    const agent = await agentRefusal(t);
    assert.equal(agent.code, 73, agent.stderr);
    assert.match(agent.stderr, /is owned by uid/);
    target.unchanged();
    assert.equal(fs.existsSync(path.join(t.root, 'data')), false, 'nothing of the station was made');
  },
);

test('a lock folder that is a link of another account is refused', { timeout: 60000 }, async () => {
  const lockDir = path.join(sticky, 'linked_locks');
  const t = makeTestEnv(catalog, {}, { lockDir });
  const target = victimFile(t);
  assert.equal(asAttacker(`ln -s ${path.dirname(target.file)} ${lockDir}`).status, 0);
  const r = await runCli(t, ['run', 'quick']);
  assert.equal(r.code, 73, r.stderr);
  assert.match(r.stderr, new RegExp(`${lockDir} is a symbolic link`));
  assert.match(r.stderr, /Fix: rm -- /);
  target.unchanged();
  assert.deepEqual(fs.readdirSync(path.dirname(target.file)), ['authorized_keys']);
});

test(
  "the victim's own lock folder is 0700 with 0600 files: the attacker can neither read a record, nor hold a slot, nor plant a file; leftover probe names break nothing",
  { timeout: 120000 },
  async () => {
    const lockDir = path.join(sticky, 'victim_locks');
    const dataDir = path.join(sticky, 'victim_data');
    // The old write probe's names, as links to a victim file, in the folder where DATA_DIR is to be made.
    const last = Number(fs.readFileSync('/proc/sys/kernel/ns_last_pid', 'utf8'));
    const t = makeTestEnv(catalog, { DATA_DIR: dataDir }, { lockDir });
    const target = victimFile(t);
    asAttacker(`i=${last}; while [ $i -lt ${last + 400} ]; do ln -s ${target.file} ${sticky}/.quantilica-write-test-$i; i=$((i+1)); done`);
    const agent = await startAgent(t);
    const client = await connectAgent(testConfig(t).connectionFile, { client: 'attacks' });
    try {
      const run = await client.run('heavy');
      await waitFor(async () => (await client.listRuns(10)).find((r) => r.runId === run.runId)?.status === 'running', {
        what: 'the run to hold a slot',
        timeoutMs: 20000,
      });
      const slot = path.join(lockDir, 'heavy-io', 'slot_0.lock');
      assert.equal(fs.statSync(lockDir).mode & 0o7777, 0o700);
      assert.equal(fs.statSync(path.join(lockDir, 'heavy-io')).mode & 0o7777, 0o700);
      assert.equal(fs.statSync(slot).mode & 0o7777, 0o600);
      assert.notEqual(asAttacker(`cat ${slot}`).status, 0, 'the owner record is private');
      assert.notEqual(
        asAttacker(`flock -n -s ${path.join(lockDir, 'heavy-io', 'slot_1.lock')} true`).status,
        0,
        'no slot can be held by the attacker',
      );
      assert.notEqual(asAttacker(`ls ${lockDir}`).status, 0);
      assert.notEqual(asAttacker(`touch ${lockDir}/x`).status, 0);
      await client.cancel({ runId: run.runId });
      await client.waitRun(run.runId);
    } finally {
      await client.close();
      agent.child.kill('SIGTERM');
    }
    target.unchanged();
    assert.equal(fs.statSync(dataDir).uid, 0, 'DATA_DIR was made by the victim');
  },
);

test(
  "with a lock group, a member's links, FIFO, huge slot number and forged owner records neither write the victim's files, nor freeze the agent, nor signal its processes",
  { timeout: 180000 },
  async () => {
    const lockDir = path.join(sticky, 'group_locks');
    const t = makeTestEnv(catalog, { QUANTILICA_LOCK_GROUP: GROUP, CRON_POOL_CPU_ANALYSIS_TIMEOUT: '600' }, { lockDir });
    const target = victimFile(t);
    const agent = await startAgent(t);
    const client = await connectAgent(testConfig(t).connectionFile, { client: 'attacks' });
    // A process of the victim, stopped and leading its own group: what a forged record points at.
    const victimProc = spawn('sleep', ['600'], { detached: true, stdio: 'ignore' });
    let attackerHolder: ChildProcess | null = null;
    /** The protocol's status must answer within a second at every step of the attack. */
    const statusAnswers = async (step: string) => {
      const t0 = Date.now();
      const snap = await client.getSnapshot();
      assert.ok(Date.now() - t0 < 1000, `status took ${Date.now() - t0} ms after ${step}`);
      return snap;
    };
    try {
      assert.equal(fs.statSync(lockDir).mode & 0o7777, 0o2770);
      assert.equal(fs.statSync(lockDir).gid, shareGid);
      process.kill(victimProc.pid!, 'SIGSTOP');
      await waitFor(() => readProcInfo(victimProc.pid!)?.state === 'T', { what: 'the victim process to stop' });
      const info = readProcInfo(victimProc.pid!)!;
      const heavy = path.join(lockDir, 'heavy-io');
      const cpu = path.join(lockDir, 'cpu-analysis');
      const forged = (pid: number, startTime: number) =>
        JSON.stringify({ pid, startTime, fetcher: 'cpu', runId: 'forged', since: '2026-01-01T00:00:00Z', agentPid: 1 });
      const planted = asAttacker(
        [
          'umask 007',
          `ln -s ${target.file} ${heavy}/slot_0.lock`,
          `mkfifo ${heavy}/slot_1.lock`,
          `printf x > ${heavy}/slot_1000000.lock`,
          `printf '%s\\n' '${forged(victimProc.pid!, info.startTime)}' > ${cpu}/slot_0.lock`,
          `printf '%s\\n' '${forged(1, readProcInfo(1)?.startTime ?? 0)}' > ${cpu}/slot_1.lock`,
        ].join(' && '),
        { member: true },
      );
      assert.equal(planted.status, 0, planted.out);
      // The member holds both cpu-analysis slots, so a victim's run must wait and consider reclaiming.
      attackerHolder = spawnAsAttacker(`exec flock -n ${cpu}/slot_0.lock flock -n ${cpu}/slot_1.lock sleep 600`, { member: true });
      const snap = await statusAnswers('planting');
      const heavyPool = snap.pools.find((p) => p.name === 'heavy-io')!;
      assert.equal(heavyPool.slots.length, 3, 'slot_1000000.lock is ignored, not walked to');
      await waitFor(async () => (await statusAnswers('the holder started')).pools.find((p) => p.name === 'cpu-analysis')!.used === 2, {
        what: 'the member to hold both cpu slots',
        timeoutMs: 20000,
      });

      // A link at slot 0: the run is refused with the reason, and the link's target is untouched.
      const linked = await client.run('quick');
      const linkedEnd = await client.waitRun(linked.runId);
      assert.equal(linkedEnd.reason, 'lock-file-unsafe');
      await statusAnswers('the link');
      // A CLI without an agent (its own home) refuses the station at start, naming the file, at once.
      const other = makeTestEnv(catalog, { QUANTILICA_LOCK_GROUP: GROUP }, { lockDir });
      const cli = await runCli(other, ['run', 'quick'], 30000);
      assert.equal(cli.code, 73, cli.stderr);
      assert.match(cli.stderr, /lock file .*(is a symbolic link|is not a regular file)/);

      // The member removes the link: slot 0 becomes the victim's; slot 1 is the FIFO, refused without blocking.
      assert.equal(asAttacker(`rm ${heavy}/slot_0.lock`, { member: true }).status, 0);
      const first = await client.run('heavy');
      await waitFor(async () => (await client.listRuns(20)).find((r) => r.runId === first.runId)?.status === 'running', {
        what: 'a run to take slot 0',
        timeoutMs: 20000,
      });
      const fifo = await client.run('quick');
      assert.equal((await client.waitRun(fifo.runId)).reason, 'lock-file-unsafe');
      await statusAnswers('the FIFO');

      // Forged records: the run waits, the stopped process they name is never signalled.
      const waiting = await client.run('cpu');
      await waitFor(() => /not provably one of our runs/.test(agent.stderr()), {
        what: 'the agent to refuse the forged holders',
        timeoutMs: 20000,
      });
      await statusAnswers('the forged records');
      assert.equal(readProcInfo(victimProc.pid!)?.state, 'T', 'the victim process named by the record is untouched');
      assert.equal((await client.listRuns(20)).find((r) => r.runId === waiting.runId)?.status, 'waiting');
      await client.cancel({ runId: waiting.runId });
      await client.cancel({ runId: first.runId });
      await client.waitRun(first.runId);
    } finally {
      attackerHolder?.kill('SIGKILL');
      victimProc.kill('SIGKILL');
      await client.close();
      agent.child.kill('SIGTERM');
    }
    // The agent was never frozen: it stops on SIGTERM.
    await waitFor(() => agent.child.exitCode !== null || agent.child.signalCode !== null, {
      what: 'the agent to stop on SIGTERM',
      timeoutMs: 15000,
    });
    target.unchanged();
  },
);
