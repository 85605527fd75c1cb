// The hook runner with real processes: its environment, its bound on hooks at once and on the queue,
// its kill of a hook that hangs (with the hook's children), and its failures logged once a period.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { OperatorEvent } from '../../shared/protocol';
import { checkEventHook } from '../../agent/events/checkEventHook';
import { EventHook } from '../../agent/events/eventHook';
import { ConfigError } from '../../agent/config/configError';
import { groupExists } from '../support/harness';
import { memoryLogger } from '../support/memoryLogger';
import { removeAtExit } from '../support/removeAtExit';
import { waitFor } from '../support/waitFor';

const event = (over: Partial<OperatorEvent> = {}): OperatorEvent => ({
  event: 'failed',
  at: new Date().toISOString(),
  runId: 'r-1',
  fetcher: 'comex',
  pool: 'heavy-io',
  exitCode: 3,
  reason: 'exit-code',
  attempt: 2,
  logPath: '/data/logs/r-1.log',
  ...over,
});

function hookScript(body: string) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-hook-'));
  removeAtExit(dir);
  const out = path.join(dir, 'out');
  fs.mkdirSync(out);
  const program = path.join(dir, 'hook.sh');
  fs.writeFileSync(program, `#!/bin/sh\nOUT=${out}\n${body}\n`, { mode: 0o700 });
  return { dir, out, program };
}

test("a hook gets the event in its environment and nothing of the agent's", async () => {
  const h = hookScript('env > "$OUT/.$$" && mv "$OUT/.$$" "$OUT/$QUANTILICA_EVENT.env"');
  process.env.QUANTILICA_TEST_SECRET = 'never-in-a-hook';
  const hook = new EventHook({ program: h.program, logger: memoryLogger() });
  try {
    hook.send(event());
    const file = path.join(h.out, 'failed.env');
    const text = await waitFor(() => fs.existsSync(file) && fs.readFileSync(file, 'utf8'), {
      what: 'the hook to write its environment',
      timeoutMs: 10_000,
    });
    const env = Object.fromEntries(
      text
        .trim()
        .split('\n')
        .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
    );
    assert.equal(env.QUANTILICA_EVENT, 'failed');
    assert.equal(env.QUANTILICA_RUN_ID, 'r-1');
    assert.equal(env.QUANTILICA_FETCHER, 'comex');
    assert.equal(env.QUANTILICA_POOL, 'heavy-io');
    assert.equal(env.QUANTILICA_EXIT_CODE, '3');
    assert.equal(env.QUANTILICA_REASON, 'exit-code');
    assert.equal(env.QUANTILICA_ATTEMPT, '2');
    assert.equal(env.QUANTILICA_LOG_PATH, '/data/logs/r-1.log');
    assert.ok(!text.includes('never-in-a-hook'), 'no variable of the agent reaches the hook');
    const names = Object.keys(env)
      .filter((k) => !['PWD', 'SHLVL', '_', 'OLDPWD'].includes(k))
      .sort();
    assert.deepEqual(names, [
      'HOME',
      'LANG',
      'PATH',
      'QUANTILICA_ATTEMPT',
      'QUANTILICA_EVENT',
      'QUANTILICA_EXIT_CODE',
      'QUANTILICA_FETCHER',
      'QUANTILICA_LOG_PATH',
      'QUANTILICA_POOL',
      'QUANTILICA_REASON',
      'QUANTILICA_RUN_ID',
    ]);
  } finally {
    delete process.env.QUANTILICA_TEST_SECRET;
    hook.close();
  }
});

test('hooks that hang: at most 4 at once, killed with their children at the timeout, the queue bounded, trouble logged once a period', async () => {
  // Each hook starts a child that would outlive it, notes both pids, and hangs.
  // The pids are written aside and renamed, so a listed file always holds both (an empty one would read as
  // pid 0, the kernel threads' group, which never ends).
  const h = hookScript(
    'sleep 300 & echo "$$ $!" > "$OUT/.$QUANTILICA_RUN_ID" && mv "$OUT/.$QUANTILICA_RUN_ID" "$OUT/$QUANTILICA_RUN_ID"; wait',
  );
  const written = () => fs.readdirSync(h.out).filter((f) => !f.startsWith('.'));
  const logger = memoryLogger();
  const hook = new EventHook({ program: h.program, logger, timeoutMs: 1500, maxQueued: 3, logPeriodMs: 60_000 });
  try {
    const started = Date.now();
    for (let i = 0; i < 10; i += 1) hook.send(event({ runId: `r${i}` }));
    assert.ok(Date.now() - started < 200, 'send never waits for a hook');
    const first = await waitFor(() => (written().length === 4 ? written() : null), {
      what: 'four hooks running',
      timeoutMs: 10_000,
    });
    assert.equal(hook.runningCount(), 4);
    assert.deepEqual(first.sort(), ['r0', 'r1', 'r2', 'r3']);
    // Ten sent, four running, three queued: the three oldest waiting were dropped.
    const dropped = logger.records.filter((r) => r.level === 'warn' && /dropped/.test(r.msg ?? ''));
    assert.equal(dropped.length, 1, 'the first trouble is logged at once, the rest counted');
    const pids = first.map((f) => fs.readFileSync(path.join(h.out, f), 'utf8').trim().split(' ').map(Number));
    for (const pair of pids) assert.ok(pair.length === 2 && pair.every((pid) => pid > 1), `two pids in each file, not ${pair.join(' ')}`);
    // At the timeout each hook's group (the hook and its sleep) is killed; the queued ones run next.
    await waitFor(() => pids.every(([pid]) => !groupExists(pid)), {
      what: 'the hung hooks and their children to be killed',
      timeoutMs: 15_000,
    });
    // Seven have run and three run now: the four killed have all ended.
    const all = await waitFor(() => (written().length === 7 && hook.runningCount() === 3 ? written() : null), {
      what: 'the queued hooks to run',
      timeoutMs: 15_000,
    });
    assert.deepEqual(all.sort(), ['r0', 'r1', 'r2', 'r3', 'r7', 'r8', 'r9']);
    assert.equal(logger.records.filter((r) => r.level === 'warn').length, 1, 'kills within the period are not logged one by one');
  } finally {
    hook.close();
  }
  const summary = logger.records.filter((r) => r.level === 'warn').at(-1);
  // At close, the trouble counted since the first report: the four kills and the two later drops.
  assert.match(summary?.msg ?? '', /4 failed, 2 dropped since the last report .*killed after 2 s/);
});

test('QUANTILICA_ON_EVENT must be an executable regular file', () => {
  const h = hookScript('true');
  assert.doesNotThrow(() => checkEventHook(h.program));
  assert.doesNotThrow(() => checkEventHook(null));
  fs.chmodSync(h.program, 0o600);
  assert.throws(
    () => checkEventHook(h.program),
    (err: unknown) => err instanceof ConfigError && /QUANTILICA_ON_EVENT=.*not executable/.test(err.message),
  );
  assert.throws(() => checkEventHook(h.dir), /not a regular file/);
  assert.throws(() => checkEventHook(path.join(h.dir, 'absent')), /ENOENT/);
});
