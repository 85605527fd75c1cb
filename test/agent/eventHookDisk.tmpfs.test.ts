// disk-paused and disk-resumed from a real agent on a real small filesystem: the gate's states reach
// the hook and `quantilica events` when the data folder fills and is freed.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { NumberedOperatorEvent } from '../../shared/protocol';
import { makeTestEnv, runCli, startAgent } from '../support/harness';
import { fillUp, freeUp, mountSmallTmpfs } from '../support/smallTmpfs';
import { waitFor } from '../support/waitFor';

test('the disk gate pausing and resuming gives disk-paused and disk-resumed to the hook and events', async (t) => {
  const dataDir = mountSmallTmpfs(t, 64);
  if (dataDir === null) return;
  const env = makeTestEnv([{ name: 'noop', pool: 'network-light', argv: ['/bin/true'] }], {
    DATA_DIR: dataDir,
    // 64 MB: paused under 20 MB free, open again from 40 MB.
    CRON_DISK_PAUSE_GB: '0.02',
    CRON_DISK_WARN_GB: '0.03',
    CRON_DISK_RESUME_GB: '0.04',
    CRON_DISK_POLL_SECONDS: '0.1',
  });
  const out = path.join(env.root, 'hook-out');
  fs.mkdirSync(out);
  const hook = path.join(env.root, 'hook.sh');
  fs.writeFileSync(hook, `#!/bin/sh\necho "$QUANTILICA_EVENT" >> ${out}/events\n`, { mode: 0o700 });
  env.env.QUANTILICA_ON_EVENT = hook;
  const agent = await startAgent(env);
  const events = async () => {
    const r = await runCli(env, ['events', '--json']);
    assert.equal(r.code, 0, r.stderr);
    return r.stdout
      .trim()
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => (JSON.parse(l) as NumberedOperatorEvent).event);
  };
  const hooked = () =>
    fs.existsSync(path.join(out, 'events')) ? fs.readFileSync(path.join(out, 'events'), 'utf8').trim().split('\n') : [];
  try {
    assert.deepEqual(await events(), [], 'an open gate says nothing');
    const filler = path.join(dataDir, 'filler');
    fillUp(filler);
    await waitFor(() => hooked().includes('disk-paused'), { what: 'the hook to get disk-paused', timeoutMs: 20_000 });
    freeUp(filler);
    await waitFor(() => hooked().includes('disk-resumed'), { what: 'the hook to get disk-resumed', timeoutMs: 20_000 });
    assert.deepEqual(hooked(), ['disk-paused', 'disk-resumed']);
    assert.deepEqual(await events(), ['disk-paused', 'disk-resumed']);
  } finally {
    const exited = new Promise((resolve) => agent.child.once('exit', resolve));
    agent.child.kill('SIGTERM');
    await exited;
  }
});
