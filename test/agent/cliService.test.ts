import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { AGENT_JS, makeTestEnv, runCli } from '../support/harness';

test('service install writes a systemd user unit that systemd-analyze accepts', async (t) => {
  const station = makeTestEnv(null);
  const result = await runCli(station, ['service', 'install', '--no-enable']);
  assert.equal(result.code, 0, result.stderr);
  const unitFile = path.join(station.home, '.config', 'systemd', 'user', 'quantilica-agent.service');
  const envFile = path.join(station.home, '.config', 'quantilica', 'agent.env');
  const unit = fs.readFileSync(unitFile, 'utf8');
  for (const line of ['Restart=on-failure', 'KillMode=process', 'Delegate=yes', `EnvironmentFile=-${envFile}`, 'WantedBy=default.target']) {
    assert.ok(unit.split('\n').includes(line), `the unit has ${line}`);
  }
  assert.match(unit, /^ExecStart=\S+node\S* \S+\/dist\/agent\.js agent$/m);
  assert.equal(fs.statSync(unitFile).mode & 0o777, 0o600);
  assert.equal(fs.statSync(envFile).mode & 0o777, 0o600);
  const status = await runCli(station, ['service', 'status']);
  assert.match(status.stdout, new RegExp(`unit: ${unitFile.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));

  const analyze = spawnSync('systemd-analyze', ['verify', unitFile], { encoding: 'utf8', env: { ...process.env, HOME: station.home } });
  if (analyze.error) {
    t.diagnostic(`systemd-analyze is not available (${analyze.error.message}): the unit text was checked, not verified by systemd`);
  } else {
    // Problems in this unit are reported with its name; other units of the machine are not ours.
    const ours = `${analyze.stdout}${analyze.stderr}`.split('\n').filter((l) => l.includes('quantilica-agent'));
    assert.deepEqual(ours, [], 'systemd-analyze verify finds nothing wrong with the unit');
  }
  const removed = await runCli(station, ['service', 'uninstall']);
  assert.match(removed.stdout, /removed/);
  assert.equal(fs.existsSync(unitFile), false);
  assert.equal(fs.existsSync(envFile), true, 'the settings stay');
});

// There is no systemd as PID 1 here: a fake `systemctl` first on PATH stands in for that one program.
// It records each call and its environment, and answers from files beside it (`state`, `fail-disable`).
const FAKE_SYSTEMCTL = `#!/bin/sh
dir=$(dirname "$0")
echo "$*" >> "$dir/calls"
env >> "$dir/env"
state=$(cat "$dir/state" 2>/dev/null || echo inactive)
case "$*" in
  *is-active*)
    [ -e "$dir/no-manager" ] && { echo "Failed to connect to bus: No medium found" >&2; exit 1; }
    echo "$state"; [ "$state" = active ] && exit 0; exit 3 ;;
  *status*) echo "fake: $state"; [ "$state" = active ] && exit 0; exit 3 ;;
  *disable*) [ -e "$dir/fail-disable" ] && { echo "Failed to disable unit: Access denied" >&2; exit 1; }; exit 0 ;;
esac
exit 0
`;

function fakeSystemctl(root: string): {
  dir: string;
  calls: () => string[];
  env: () => string;
  set: (file: string, text: string | null) => void;
} {
  const dir = path.join(root, 'fakebin');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'systemctl'), FAKE_SYSTEMCTL, { mode: 0o755 });
  const read = (f: string) => (fs.existsSync(path.join(dir, f)) ? fs.readFileSync(path.join(dir, f), 'utf8') : '');
  return {
    dir,
    calls: () =>
      read('calls')
        .split('\n')
        .filter((l) => l !== ''),
    env: () => read('env'),
    set: (file, text) => (text === null ? fs.rmSync(path.join(dir, file), { force: true }) : fs.writeFileSync(path.join(dir, file), text)),
  };
}

const SECRET_URL = 'postgres://quant:svcsecret9@127.0.0.1:5432/telemetry';

test('service install carries CRON_*, QUANTILICA_* and DATA_DIR into agent.env, secrets only with --with-secrets, and says what it carried', async () => {
  const station = makeTestEnv(null, { QUANTILICA_DATABASE_URL: SECRET_URL, GITHUB_TOKEN: 'ghp_svcsecret8', QUANTILICA_STATION: "it's-7" });
  const fake = fakeSystemctl(station.root);
  const env = { ...station.env, PATH: `${fake.dir}:${station.env.PATH ?? ''}` };
  const envFile = path.join(station.home, '.config', 'quantilica', 'agent.env');
  try {
    const plain = await runCli(env, ['service', 'install']);
    assert.equal(plain.code, 0, plain.stderr);
    const written = fs.readFileSync(envFile, 'utf8');
    assert.equal(fs.statSync(envFile).mode & 0o777, 0o600);
    for (const line of [
      "CRON_USE_POOLS='true'",
      `DATA_DIR='${station.dataDir}'`,
      `QUANTILICA_LOCK_DIR='${station.lockDir}'`,
      'QUANTILICA_STATION="it\'s-7"',
    ]) {
      assert.ok(written.split('\n').includes(line), `agent.env has ${line}:\n${written}`);
    }
    assert.doesNotMatch(written, /svcsecret|QUANTILICA_DATABASE_URL|GITHUB_TOKEN/, 'no secret without --with-secrets');
    assert.match(plain.stdout, /^ {2}CRON_USE_POOLS=true$/m);
    assert.match(
      plain.stdout,
      /not written: QUANTILICA_DATABASE_URL=postgres:\/\/\*\*\*@127\.0\.0\.1:5432\/telemetry \(a secret; --with-secrets/,
    );
    assert.match(plain.stdout, /not written: GITHUB_TOKEN=\*\*\* \(a secret/);
    assert.deepEqual(fake.calls(), ['--user daemon-reload', '--user enable --now quantilica-agent.service']);
    assert.doesNotMatch(fake.env(), /svcsecret|QUANTILICA_|CRON_/, "systemctl gets none of the agent's settings or secrets");

    // A second install keeps what the operator added by hand and writes the secrets when asked.
    fs.appendFileSync(envFile, 'PYTHONUNBUFFERED=1\n');
    const secrets = await runCli({ ...env, CRON_USE_POOLS: 'false' }, ['service', 'install', '--no-enable', '--with-secrets']);
    assert.equal(secrets.code, 0, secrets.stderr);
    const again = fs.readFileSync(envFile, 'utf8').split('\n');
    assert.ok(again.includes(`QUANTILICA_DATABASE_URL='${SECRET_URL}'`), again.join('\n'));
    assert.ok(again.includes("GITHUB_TOKEN='ghp_svcsecret8'"));
    assert.ok(again.includes("CRON_USE_POOLS='false'") && !again.includes("CRON_USE_POOLS='true'"), 'a carried setting replaces its line');
    assert.ok(again.includes('PYTHONUNBUFFERED=1'), 'a line written by hand stays');
    assert.equal(fs.statSync(envFile).mode & 0o777, 0o600);
    assert.doesNotMatch(secrets.stdout + secrets.stderr, /svcsecret/, 'what was carried is printed with the secrets redacted');
    assert.match(secrets.stdout, /^ {2}QUANTILICA_DATABASE_URL=postgres:\/\/\*\*\*@127\.0\.0\.1:5432\/telemetry$/m);
  } finally {
    fs.rmSync(station.root, { recursive: true, force: true });
  }
});

test('service status exits as systemctl is-active (0 active, 3 not, 69 without a user manager); uninstall reports a failed systemctl', async () => {
  const station = makeTestEnv(null);
  const fake = fakeSystemctl(station.root);
  const env = { ...station.env, PATH: `${fake.dir}:${station.env.PATH ?? ''}` };
  try {
    assert.equal((await runCli(env, ['service', 'install'])).code, 0);
    fake.set('state', 'active');
    const active = await runCli(env, ['service', 'status']);
    assert.equal(active.code, 0, active.stderr);
    assert.match(active.stdout, /fake: active/);
    fake.set('state', 'failed');
    assert.equal((await runCli(env, ['service', 'status'])).code, 3);
    fake.set('state', 'inactive');
    assert.equal((await runCli(env, ['service', 'status'])).code, 3);
    fake.set('no-manager', '');
    const unreachable = await runCli(env, ['service', 'status']);
    assert.equal(unreachable.code, 69, unreachable.stderr);
    assert.match(
      unreachable.stderr,
      /^quantilica: cannot ask the user's systemd whether quantilica-agent\.service is active: Failed to connect to bus/m,
    );
    fake.set('no-manager', null);

    fake.set('fail-disable', '');
    const failed = await runCli(env, ['service', 'uninstall']);
    assert.equal(failed.code, 69, failed.stderr);
    assert.match(
      failed.stderr,
      /^quantilica: systemctl --user disable --now quantilica-agent\.service failed: Failed to disable unit: Access denied$/m,
    );
    fake.set('fail-disable', null);
    assert.equal((await runCli(env, ['service', 'install', '--no-enable'])).code, 0);
    const removed = await runCli(env, ['service', 'uninstall']);
    assert.equal(removed.code, 0, removed.stderr);
    assert.equal((await runCli(env, ['service', 'status'])).code, 3, 'an uninstalled unit is not active');
  } finally {
    fs.rmSync(station.root, { recursive: true, force: true });
  }
});

test('the unit escapes % and $ in its paths, and a path with a control character is refused before anything is written', async (t) => {
  const station = makeTestEnv(null);
  try {
    // The agent script under a folder whose name systemd would expand (%h, $USER), reached through a link.
    const odd = path.join(station.root, 'q%h$USER');
    fs.symlinkSync(path.dirname(AGENT_JS), odd);
    const config = path.join(station.root, 'cfg%u$HOME');
    const env = { ...station.env, XDG_CONFIG_HOME: config };
    const r = spawnSync(process.execPath, [path.join(odd, 'agent.js'), 'service', 'install', '--no-enable'], { env, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const unitFile = path.join(config, 'systemd', 'user', 'quantilica-agent.service');
    const unit = fs.readFileSync(unitFile, 'utf8').split('\n');
    const exec = unit.find((l) => l.startsWith('ExecStart='));
    assert.equal(
      exec,
      `ExecStart=${process.execPath.replace(/%/g, '%%').replace(/\$/g, '$$$$')} "${path.join(station.root, 'q%%h$$USER', 'agent.js')}" agent`,
    );
    assert.ok(unit.includes(`EnvironmentFile=-${path.join(station.root, 'cfg%%u$HOME', 'quantilica', 'agent.env')}`), unit.join('\n'));
    const analyze = spawnSync('systemd-analyze', ['verify', unitFile], { encoding: 'utf8', env: { ...process.env, HOME: station.home } });
    if (analyze.error) t.diagnostic(`systemd-analyze is not available (${analyze.error.message})`);
    else
      assert.deepEqual(
        `${analyze.stdout}${analyze.stderr}`.split('\n').filter((l) => l.includes('quantilica-agent')),
        [],
      );

    const newline = path.join(station.root, 'cfg\nExecStartPre=/bin/false');
    const refused = await runCli({ ...station.env, XDG_CONFIG_HOME: newline }, ['service', 'install', '--no-enable']);
    assert.equal(refused.code, 78, refused.stderr);
    assert.match(
      refused.stderr,
      /^quantilica: the environment file's path ".*\\nExecStartPre=\/bin\/false.*" has a control character, which a systemd unit cannot hold/m,
    );
    assert.equal(fs.existsSync(newline), false, 'nothing was written');
  } finally {
    fs.rmSync(station.root, { recursive: true, force: true });
  }
});
