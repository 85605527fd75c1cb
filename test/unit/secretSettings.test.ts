// The settings table marks the secrets, and what fetchers are denied is derived from it: a secret
// added to the table is withheld from fetchers without a second list to keep in step.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { loadConfig } from '../../agent/config/config';
import { ConfigError } from '../../agent/config/configError';
import { redactCredentials, redactSecretValue } from '../../agent/config/redact';
import { SECRET_SETTINGS, SETTINGS } from '../../agent/config/settings';
import { fetcherEnv } from '../../agent/runs/fetcherEnv';

test('the secrets are the settings marked secret, the slot database URL among them', () => {
  const marked = SETTINGS.filter((s) => 'secret' in s && s.secret).map((s) => s.name);
  assert.deepEqual([...SECRET_SETTINGS], marked);
  for (const name of ['QUANTILICA_DATABASE_URL', 'QUANTILICA_SLOT_DATABASE_URL', 'GITHUB_TOKEN', 'PGPASSWORD'])
    assert.ok(SECRET_SETTINGS.includes(name), `${name} is marked secret`);
});

test('a fetcher gets no setting marked secret unless passEnv names it, and keeps everything else', () => {
  const base: NodeJS.ProcessEnv = { PATH: '/usr/bin', CRON_USE_POOLS: 'true' };
  for (const name of SECRET_SETTINGS) base[name] = `secret-of-${name}`;
  const env = fetcherEnv({ base, run: { QUANTILICA_RUN_ID: 'r1' }, fetcherUmask: '022' });
  for (const name of SECRET_SETTINGS) assert.equal(env[name], undefined, `${name} is withheld`);
  assert.equal(env.PATH, '/usr/bin');
  assert.equal(env.CRON_USE_POOLS, 'true');
  const passed = fetcherEnv({ base, passEnv: ['QUANTILICA_SLOT_DATABASE_URL'], run: {}, fetcherUmask: '022' });
  assert.equal(passed.QUANTILICA_SLOT_DATABASE_URL, 'secret-of-QUANTILICA_SLOT_DATABASE_URL');
  assert.equal(passed.GITHUB_TOKEN, undefined);
});

test('a config file that names an environment-only secret is refused, saying where it belongs', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-secret-'));
  try {
    const file = path.join(dir, 'config.json');
    fs.writeFileSync(file, JSON.stringify({ GITHUB_TOKEN: 'ghp_x' }));
    assert.throws(
      () => loadConfig({ HOME: dir, QUANTILICA_CONFIG: file }),
      (err: unknown) => err instanceof ConfigError && /GITHUB_TOKEN is read from the environment only/.test(err.message),
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('redaction ends at the last @ of a URL, whatever the password holds', () => {
  for (const password of ['pa/ss', 'pa#ss', 'pa?ss', 'a/b#c?d', 'p@ss/w#rd?x', 'pa ss']) {
    const url = `postgres://quant:${password}@db.example:5432/telemetry`;
    assert.equal(redactSecretValue(url), 'postgres://***@db.example:5432/telemetry', url);
    if (!password.includes(' '))
      assert.equal(redactCredentials(`connect ${url} failed`), 'connect postgres://***@db.example:5432/telemetry failed', url);
  }
  assert.equal(redactSecretValue('ghp_plaintoken'), '***', 'a secret that is no URL is not shown');
  assert.equal(redactSecretValue('postgres://db.example/telemetry'), 'postgres://db.example/telemetry', 'no credentials, nothing to hide');
});
