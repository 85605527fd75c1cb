// Bad settings and a missing catalog cwd, refused at start with the
// setting named and no secret echoed, and the newcomer's first hour: --version, the standard's
// `--flush`, `flush` printing its result once, human log lines on a terminal, and the summary
// `npm start` prints on a terminal.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { writeConnectionFile } from '../../agent/server/connectionFile';
import { AGENT_JS, makeTestEnv, runCli, type TestEnv } from '../support/harness';
import { startTestPostgres } from '../support/postgres';
import { waitFor } from '../support/waitFor';

const stations: TestEnv[] = [];
after(() => {
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});
function station(extra: Record<string, string> = {}): TestEnv {
  const s = makeTestEnv([{ name: 'marker', pool: 'network-light', argv: ['/bin/sh', '-c', 'echo ran > "$DATA_DIR/marker.out"'] }], extra);
  stations.push(s);
  return s;
}

test('bad settings exit 78 or 73 naming the variable, before anything is created', async () => {
  const s = station();
  const cases: Array<[Record<string, string>, number, RegExp]> = [
    [{ QUANTILICA_LOG_LEVEL: 'bogus' }, 78, /QUANTILICA_LOG_LEVEL="bogus": allowed: fatal, error, warn, info/],
    [{ QUANTILICA_HOME: '/etc/passwd' }, 73, /QUANTILICA_HOME=\/etc\/passwd is not a writable directory/],
    [{ QUANTILICA_LOG_DIR: '/dev/null/x' }, 73, /QUANTILICA_LOG_DIR=\/dev\/null\/x is not a writable directory/],
    [{ DATA_DIR: '/proc/1' }, 73, /DATA_DIR=\/proc\/1: \/proc\/1 is on a kernel filesystem/],
    [{ QUANTILICA_DATABASE_URL: 'postgres://%%%:@@@/??' }, 78, /QUANTILICA_DATABASE_URL=.*allowed: a postgres/],
  ];
  for (const [env, code, message] of cases) {
    for (const command of [['status'], ['agent']]) {
      const r = await runCli({ ...s.env, ...env }, command, 30_000);
      assert.equal(r.code, code, `${JSON.stringify(env)} ${command[0]}: ${r.stderr}`);
      assert.match(r.stderr, message);
      assert.doesNotMatch(r.stderr, /"level"/, 'a message, not a log record');
    }
  }
  assert.equal(fs.existsSync(path.join(s.home, '.quantilica', 'state.db')), false, 'nothing was created');
});

test('QUANTILICA_LOG_LEVEL in the config file is accepted', async () => {
  const s = station();
  const config = path.join(s.root, 'config.json');
  fs.writeFileSync(config, JSON.stringify({ QUANTILICA_LOG_LEVEL: 'debug' }));
  const r = await runCli({ ...s.env, QUANTILICA_CONFIG: config }, ['status']);
  assert.equal(r.code, 0, r.stderr);
});

test('a port in use stops the agent with exit 73 naming QUANTILICA_PORT', async () => {
  const s = station();
  const blocker = net.createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', () => resolve()));
  const port = (blocker.address() as net.AddressInfo).port;
  try {
    const r = await runCli({ ...s.env, QUANTILICA_PORT: String(port) }, ['agent'], 30_000);
    assert.equal(r.code, 73, r.stderr);
    assert.match(r.stderr, new RegExp(`QUANTILICA_PORT=${port}: cannot listen on 127.0.0.1:${port} \\(the port is in use\\)`));
  } finally {
    blocker.close();
  }
});

test('a catalog cwd that does not exist is refused at start, every such entry listed', async () => {
  const s = station();
  const catalog = path.join(s.root, 'cwd-catalog.json');
  fs.writeFileSync(
    catalog,
    JSON.stringify({
      fetchers: [
        { name: 'a', pool: 'heavy-io', argv: ['/bin/true'], cwd: path.join(s.root, 'missing-a') },
        { name: 'b', pool: 'heavy-io', argv: ['/bin/true'], cwd: path.join(s.root, 'missing-b') },
      ],
    }),
  );
  for (const command of [['run', 'a'], ['agent']]) {
    const r = await runCli({ ...s.env, QUANTILICA_CATALOG: catalog }, command, 30_000);
    assert.equal(r.code, 78, r.stderr);
    assert.match(r.stderr, /fetchers\.0\.cwd: .*missing-a .*cwd-missing/);
    assert.match(r.stderr, /fetchers\.1\.cwd: .*missing-b .*cwd-missing/);
  }
});

test('--version prints the version; `quantilica --flush` is `quantilica flush`', async () => {
  const s = station();
  const version = await runCli(s, ['--version']);
  assert.equal(version.code, 0, version.stderr);
  assert.equal(
    version.stdout.trim(),
    (JSON.parse(fs.readFileSync(path.join(AGENT_JS, '..', '..', 'package.json'), 'utf8')) as { version: string }).version,
  );
  const flush = await runCli(s, ['--flush']);
  assert.match(flush.stdout, /^flush: 0 sent, 0 remaining/m, flush.stderr);
});

test('flush prints its result once', async () => {
  const db = await startTestPostgres();
  try {
    const s = station({ QUANTILICA_DATABASE_URL: db.url });
    for (let i = 0; i < 3; i++) assert.equal((await runCli(s, ['run', 'marker'])).code, 0);
    const r = await runCli(s, ['flush']);
    assert.equal(r.code, 0, r.stderr);
    const lines = `${r.stdout}${r.stderr}`.split('\n').filter((l) => l.includes('flush:'));
    assert.equal(lines.length, 1, `one result line: ${JSON.stringify(lines)}`);
    assert.match(lines[0], /^flush: \d+ sent, 0 remaining$/);
  } finally {
    await db.stop();
  }
});

/** Runs a command under a pseudo-terminal (util-linux `script`), as a person at a terminal would. */
function onTerminal(s: TestEnv, args: string[]) {
  const command = [process.execPath, AGENT_JS, ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
  const child = spawn('script', ['--quiet', '--return', '--command', command, '/dev/null'], {
    env: s.env,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (d: Buffer) => {
    output += d.toString();
  });
  child.stderr.on('data', (d: Buffer) => {
    output += d.toString();
  });
  return { child, output: () => output, ended: new Promise<number | null>((resolve) => child.once('exit', resolve)) };
}

test('a CLI without an agent logs human lines on a terminal, JSON lines otherwise', async () => {
  const s = station({ QUANTILICA_LOG_LEVEL: 'info' });
  // A stale connection file: the CLI says, at level info, that it works in-process.
  await writeConnectionFile(path.join(s.home, '.quantilica', 'agent.json'), {
    port: 1,
    token: 'A'.repeat(43),
    pid: 999999,
    protocolVersion: 1,
    uid: 0,
    startTime: 1,
    bootId: 'x',
  });
  const tty = onTerminal(s, ['status']);
  assert.equal(await tty.ended, 0, tty.output());
  assert.match(tty.output(), /quantilica: info: the connection file .* working in-process/);
  assert.doesNotMatch(tty.output(), /"level":/);
  const piped = await runCli(s, ['status']);
  assert.equal(piped.code, 0, piped.stderr);
  assert.match(piped.stderr, /"level":30.*working in-process/);
});

test('`npm start` on a terminal prints a short summary of where things are', async () => {
  const s = station();
  const tty = onTerminal(s, ['agent']);
  try {
    const text = await waitFor(() => (tty.output().includes('Ctrl-C stops the agent') ? tty.output() : null), {
      what: 'the summary',
      timeoutMs: 30_000,
      intervalMs: 100,
    });
    assert.match(text, /Quantilica agent ready \(pid \d+, 127\.0\.0\.1:\d+\)/);
    for (const label of ['pools:', 'data:', 'run logs:', 'spool:', 'connection:']) assert.ok(text.includes(label), label);
    assert.ok(text.includes(s.dataDir));
    assert.doesNotMatch(text, /"ready":true/);
  } finally {
    // The agent's pid from its summary, or from a JSON ready line if it printed that instead.
    const pid = Number(/ready \(pid (\d+)/.exec(tty.output())?.[1] ?? /"pid":(\d+)/.exec(tty.output())?.[1]);
    if (pid > 0) process.kill(pid, 'SIGTERM');
    else tty.child.kill('SIGKILL');
    await tty.ended;
  }
});
