import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { makeTestEnv, runCli } from '../support/harness';

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
