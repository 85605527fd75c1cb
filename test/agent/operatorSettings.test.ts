// Bad operator settings are refused at start (exit 78, the setting or field named, nothing started),
// and a metrics address beyond the loopback is served with a warning.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { makeTestEnv, runCli, startAgent } from '../support/harness';
import { freePort } from '../support/prometheus';
import { waitFor } from '../support/waitFor';

test('a QUANTILICA_ON_EVENT that is not an absolute executable file, or an unparsable QUANTILICA_METRICS_LISTEN, is refused with exit 78', async () => {
  const t = makeTestEnv([{ name: 'noop', pool: 'network-light', argv: ['/bin/true'] }]);
  const notExecutable = path.join(t.root, 'hook.sh');
  fs.writeFileSync(notExecutable, '#!/bin/sh\n', { mode: 0o600 });
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ QUANTILICA_ON_EVENT: 'hook.sh' }, /QUANTILICA_ON_EVENT="hook\.sh": allowed: an absolute path to an executable file/],
    [{ QUANTILICA_ON_EVENT: notExecutable }, /QUANTILICA_ON_EVENT=".*hook\.sh": not executable/],
    [{ QUANTILICA_ON_EVENT: t.root }, /QUANTILICA_ON_EVENT=".*": not a regular file/],
    [{ QUANTILICA_ON_EVENT: path.join(t.root, 'absent') }, /QUANTILICA_ON_EVENT=".*absent": cannot be used \(ENOENT\)/],
    [{ QUANTILICA_METRICS_LISTEN: 'localhost:9464' }, /QUANTILICA_METRICS_LISTEN="localhost:9464": allowed: PORT, HOST:PORT/],
    [{ QUANTILICA_METRICS_LISTEN: '127.0.0.1:70000' }, /QUANTILICA_METRICS_LISTEN="127\.0\.0\.1:70000"/],
    [{ QUANTILICA_METRICS_LISTEN: '127.0.0.1:' }, /QUANTILICA_METRICS_LISTEN="127\.0\.0\.1:"/],
  ];
  for (const [extra, message] of cases) {
    const r = await runCli({ ...t.env, ...extra }, ['agent']);
    assert.equal(r.code, 78, `${JSON.stringify(extra)}: ${r.stderr}`);
    assert.match(r.stderr, message);
    assert.ok(!fs.existsSync(path.join(t.home, '.quantilica', 'agent.json')), 'no agent started');
  }
  // Events are the running agent's: without one, said so (exit 69), nothing started in-process.
  const events = await runCli(t, ['events']);
  assert.equal(events.code, 69, events.stderr);
  assert.match(events.stderr, /quantilica: no agent is running: operator events are kept by the running agent only/);
  const usage = await runCli(t, ['events', '--limit', '0']);
  assert.equal(usage.code, 64, usage.stderr);
});

test('a bad lateAfterMinutes is refused at start with its field named', async () => {
  for (const [entry, message] of [
    [{ schedule: '0 * * * *', lateAfterMinutes: -5 }, /fetchers\.0\.lateAfterMinutes: Number must be greater than 0/],
    [{ schedule: '0 * * * *', lateAfterMinutes: '10' }, /fetchers\.0\.lateAfterMinutes: Expected number/],
    [{ lateAfterMinutes: 10 }, /fetcher noop: lateAfterMinutes needs a schedule/],
  ] as const) {
    const t = makeTestEnv(null);
    const catalog = path.join(t.root, 'catalog.json');
    fs.writeFileSync(catalog, JSON.stringify({ fetchers: [{ name: 'noop', pool: 'network-light', argv: ['/bin/true'], ...entry }] }));
    const r = await runCli({ ...t.env, QUANTILICA_CATALOG: catalog }, ['agent']);
    assert.equal(r.code, 78, r.stderr);
    assert.match(r.stderr, message);
  }
});

test('metrics on an address beyond the loopback are served, with a warning; a port alone means the loopback', async () => {
  const port = await freePort();
  const t = makeTestEnv([{ name: 'noop', pool: 'network-light', argv: ['/bin/true'] }], {
    QUANTILICA_METRICS_LISTEN: `0.0.0.0:${port}`,
    QUANTILICA_LOG_LEVEL: 'info',
  });
  const agent = await startAgent(t);
  try {
    await waitFor(() => /beyond the loopback and without a token/.test(agent.stderr()), { what: 'the warning', timeoutMs: 10_000 });
    assert.equal((await fetch(`http://127.0.0.1:${port}/metrics`)).status, 200);
  } finally {
    const exited = new Promise((resolve) => agent.child.once('exit', resolve));
    agent.child.kill('SIGTERM');
    await exited;
  }
  const loopback = makeTestEnv([{ name: 'noop', pool: 'network-light', argv: ['/bin/true'] }], {
    QUANTILICA_METRICS_LISTEN: String(port),
    QUANTILICA_LOG_LEVEL: 'info',
  });
  const second = await startAgent(loopback);
  try {
    await waitFor(() => new RegExp(`serving http://127\\.0\\.0\\.1:${port}/metrics`).test(second.stderr()), {
      what: 'the loopback listener',
      timeoutMs: 10_000,
    });
    assert.equal((await fetch(`http://127.0.0.1:${port}/metrics`)).status, 200);
    assert.doesNotMatch(second.stderr(), /beyond the loopback/);
  } finally {
    const exited = new Promise((resolve) => second.child.once('exit', resolve));
    second.child.kill('SIGTERM');
    await exited;
  }
});
