// A password with unencoded `/`, `#`, `?` (or `@`) in a database URL: the exit-78 message
// names the setting and shows the URL with everything between the scheme and the last `@` hidden.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { after, test } from 'node:test';
import { makeTestEnv, runCli } from '../support/harness';

const s = makeTestEnv(null);
after(() => fs.rmSync(s.root, { recursive: true, force: true }));

// Pieces that appear nowhere else in the message.
const PASSWORDS = ['hxqa/zvkb', 'hxqa#zvkb', 'hxqa?zvkb', 'hxqa/zvkb#wpjc?mtnd', 'hxqa@zvkb/wpjc#mtnd?'];

for (const setting of ['QUANTILICA_DATABASE_URL', 'QUANTILICA_SLOT_DATABASE_URL'] as const) {
  test(`${setting}: a password holding / # ? or @ is never printed by the exit-78 error`, { timeout: 120_000 }, async () => {
    for (const password of PASSWORDS) {
      const url = `postgres://quant:${password}@127.0.0.1:5432/telemetry`;
      const r = await runCli({ ...s.env, QUANTILICA_SLOT_BACKEND: 'postgres', [setting]: url }, ['status']);
      assert.equal(r.code, 78, `${url}: ${r.stderr}`);
      assert.match(r.stderr, /^quantilica: invalid configuration/m, r.stderr);
      assert.ok(
        r.stderr.includes(`${setting}="postgres://***@127.0.0.1:5432/telemetry"`),
        `the setting is named, its URL redacted: ${r.stderr}`,
      );
      // No piece of the password: each fragment between its special characters.
      for (const piece of password.split(/[/#?@ ]/).filter((p) => p !== ''))
        assert.ok(!(r.stderr + r.stdout).includes(piece), `${JSON.stringify(piece)} of ${url} is not shown: ${r.stderr}`);
    }
  });
}
