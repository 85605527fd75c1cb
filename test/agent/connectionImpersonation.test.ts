// A connection file left by a killed agent. Another user who
// gets the recorded pid and listens on the recorded port must receive nothing (not the token, not a
// byte), and the victim's cron `quantilica run` must really run the fetcher in-process. A stale file
// whose pid now names some other process of ours, with nothing listening, must not break commands.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { ConnectionFileError, readConnectionFile, readLiveConnectionFile } from '../../shared/node/connectionFile';
import { writeConnectionFile } from '../../agent/server/connectionFile';
import { makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';
import { createUnprivilegedUser, type UnprivilegedUser } from '../support/unprivilegedUser';
import { waitFor } from '../support/waitFor';

const stations: TestEnv[] = [];
const children: ChildProcess[] = [];
let user: UnprivilegedUser | null = null;

after(() => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  user?.remove();
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

function station(): TestEnv {
  const s = makeTestEnv([{ name: 'marker', pool: 'network-light', argv: ['/bin/sh', '-c', 'echo ran > "$DATA_DIR/marker.out"'] }]);
  stations.push(s);
  return s;
}

const connectionFile = (s: TestEnv) => path.join(s.home, '.quantilica', 'agent.json');

/**
 * Spawns the attacker's listener so that it gets exactly `pid` (as root, through ns_last_pid, the
 * way a patient attacker gets it by forking until the counter comes round). The listener records
 * every byte it receives.
 */
async function listenerWithPid(attacker: UnprivilegedUser, pid: number, port: number, capture: string): Promise<ChildProcess> {
  const code = `
    const fs = require('node:fs'); const net = require('node:net');
    const server = net.createServer((socket) => socket.on('data', (d) => fs.appendFileSync(${JSON.stringify(capture)}, d)));
    server.listen(${port}, '127.0.0.1', () => process.stdout.write('listening\\n'));`;
  for (let attempt = 0; attempt < 200; attempt++) {
    fs.writeFileSync('/proc/sys/kernel/ns_last_pid', String(pid - 1));
    const child = attacker.spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(child);
    if (child.pid === pid) {
      await new Promise<void>((resolve, reject) => {
        child.stdout?.once('data', () => resolve());
        child.once('exit', (c) => reject(new Error(`the attacker's listener exited with ${c}`)));
      });
      return child;
    }
    child.kill('SIGKILL');
  }
  throw new Error(`could not give the attacker pid ${pid}`);
}

test("another user holding the dead agent's pid and port receives nothing; the run runs in-process", async () => {
  const s = station();
  const agent = await startAgent(s);
  const info = await readConnectionFile(connectionFile(s));
  const exited = new Promise((resolve) => agent.child.once('exit', resolve));
  agent.child.kill('SIGKILL');
  await exited;

  user = createUnprivilegedUser('qimp');
  const captureDir = fs.mkdtempSync(path.join(s.root, '..', 'qimp-capture-'));
  fs.chownSync(captureDir, user.uid, user.gid);
  const capture = path.join(captureDir, 'received');
  const listener = await listenerWithPid(user, info.pid, info.port, capture);
  assert.equal(listener.pid, info.pid, 'the attacker has the pid the connection file names');

  const r = await runCli(s, ['run', 'marker']);
  assert.equal(r.code, 0, `the victim's run: ${r.stderr}`);
  assert.match(r.stdout, /completed/);
  assert.equal(fs.readFileSync(path.join(s.dataDir, 'marker.out'), 'utf8'), 'ran\n', 'the fetcher really ran');
  const received = fs.existsSync(capture) ? fs.readFileSync(capture, 'utf8') : '';
  assert.equal(received.includes(info.token), false, 'the token never reached the attacker');
  assert.equal(received, '', 'the victim sent the impostor nothing at all');

  // The extension (extension/agentTransport.ts reads the file through this) sees "no agent" for the
  // same file, before sending anything.
  await assert.rejects(
    readLiveConnectionFile(connectionFile(s)),
    (err: unknown) => err instanceof ConnectionFileError && err.reason === 'stale',
  );
  assert.equal(fs.existsSync(capture) ? fs.readFileSync(capture, 'utf8') : '', '');
  listener.kill('SIGKILL');
  fs.rmSync(captureDir, { recursive: true, force: true });
});

test('a stale file whose pid is now another process of ours, with nothing listening, falls back in-process', async () => {
  const s = station();
  const agent = await startAgent(s);
  const info = await readConnectionFile(connectionFile(s));
  const exited = new Promise((resolve) => agent.child.once('exit', resolve));
  agent.child.kill('SIGKILL');
  await exited;
  // The pid now names a live process of the same user (as after a reboot or pid reuse).
  const other = spawn('sleep', ['600'], { stdio: 'ignore' });
  children.push(other);
  await writeConnectionFile(connectionFile(s), { ...info, pid: other.pid ?? 0 });
  await waitFor(() => fs.existsSync(`/proc/${other.pid}`), { what: 'the other process' });

  const status = await runCli(s, ['status']);
  assert.equal(status.code, 0, status.stderr);
  assert.match(status.stdout, /not running/);
  const r = await runCli(s, ['run', 'marker']);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(fs.readFileSync(path.join(s.dataDir, 'marker.out'), 'utf8'), 'ran\n');
  other.kill('SIGKILL');
});

test('a live agent is still reached, through the challenge', async () => {
  const s = station();
  const agent = await startAgent(s);
  try {
    const r = await runCli(s, ['status', '--json']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal((JSON.parse(r.stdout) as { agent: { pid: number } }).agent.pid, agent.child.pid);
  } finally {
    const exited = new Promise((resolve) => agent.child.once('exit', resolve));
    agent.child.kill('SIGTERM');
    await exited;
  }
});
