// The operator events end to end, with a real agent: the hook program gets failed, recovered and
// late with their variables (never the agent's secrets), `quantilica events` and `schedule`/`status`
// show the same, /metrics counts the runs and survives a restart, and a hook that hangs never
// delays a run.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { NumberedOperatorEvent, ScheduleStatus } from '../../shared/protocol';
import { moment } from '../../agent/cli/timeText';
import { AGENT_JS, makeTestEnv, runCli, startAgent, type TestEnv } from '../support/harness';
import { freePort } from '../support/prometheus';
import { waitFor } from '../support/waitFor';

function station(hookBody: string, metricsPort: number) {
  const t = makeTestEnv(null);
  const hookDir = path.join(t.root, 'hook-out');
  fs.mkdirSync(hookDir);
  const hook = path.join(t.root, 'hook.sh');
  fs.writeFileSync(hook, `#!/bin/sh\nOUT=${hookDir}\n${hookBody}\n`, { mode: 0o700 });
  const okFile = path.join(t.root, 'ok');
  const catalog = path.join(t.root, 'catalog.json');
  fs.writeFileSync(
    catalog,
    JSON.stringify({
      fetchers: [
        { name: 'flaky', pool: 'network-light', argv: ['/bin/sh', '-c', `test -e ${okFile}`] },
        // Due every 3 s, never succeeding: late 1.2 s after a due time.
        {
          name: 'nightly',
          pool: 'cpu-analysis',
          argv: ['/bin/sh', '-c', 'exit 1'],
          schedule: '*/3 * * * * *',
          timezone: 'UTC',
          lateAfterMinutes: 0.02,
        },
      ],
    }),
  );
  Object.assign(t.env, {
    QUANTILICA_CATALOG: catalog,
    QUANTILICA_ON_EVENT: hook,
    QUANTILICA_METRICS_LISTEN: `127.0.0.1:${metricsPort}`,
    GITHUB_TOKEN: 'ghp_never_in_a_hook',
  });
  return { t, hookDir, okFile };
}

const envFiles = (dir: string) =>
  fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.env'))
    .map((f) => {
      const text = fs.readFileSync(path.join(dir, f), 'utf8');
      return {
        text,
        vars: Object.fromEntries(
          text
            .trim()
            .split('\n')
            .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
        ),
      };
    });

async function events(t: TestEnv): Promise<NumberedOperatorEvent[]> {
  const r = await runCli(t, ['events', '--json', '--limit', '1000']);
  assert.equal(r.code, 0, r.stderr);
  return r.stdout
    .trim()
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as NumberedOperatorEvent);
}

async function scrape(port: number, pathName = '/metrics'): Promise<{ status: number; text: string; type: string | null }> {
  const res = await fetch(`http://127.0.0.1:${port}${pathName}`);
  return { status: res.status, text: await res.text(), type: res.headers.get('content-type') };
}

const sample = (text: string, name: string, labels: string) => {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`) || (labels === '' && l.startsWith(`${name} `)));
  return line === undefined ? null : Number(line.slice(line.lastIndexOf(' ') + 1));
};

async function stop(agent: Awaited<ReturnType<typeof startAgent>>): Promise<void> {
  const exited = new Promise((resolve) => agent.child.once('exit', resolve));
  agent.child.kill('SIGTERM');
  await exited;
}

test('failed, recovered and late reach the hook, quantilica events, schedule, status and /metrics', async () => {
  const port = await freePort();
  const { t, hookDir, okFile } = station('env > "$OUT/.$$" && mv "$OUT/.$$" "$OUT/$QUANTILICA_EVENT-$$.env"', port);
  let agent = await startAgent(t);
  try {
    const failed = await runCli(t, ['run', 'flaky']);
    assert.equal(failed.code, 1, failed.stderr);
    fs.writeFileSync(okFile, '');
    const ok = await runCli(t, ['run', 'flaky']);
    assert.equal(ok.code, 0, ok.stderr);

    const late = await waitFor(
      async () => {
        const r = await runCli(t, ['schedule', '--json']);
        const entry = (JSON.parse(r.stdout) as { schedule: ScheduleStatus }).schedule.entries.find((e) => e.fetcher === 'nightly');
        return entry?.lateSince ? entry : null;
      },
      { what: 'nightly to be late', timeoutMs: 30_000, intervalMs: 200 },
    );
    assert.equal(late.lateAfterMinutes, 0.02);
    assert.equal(late.lastSuccessAt ?? null, null);

    const table = await runCli(t, ['schedule']);
    assert.match(table.stdout, /LATE\n/, 'a LATE column');
    assert.match(table.stdout.split('\n').find((l) => l.includes('nightly')) ?? '', /LATE since .*ago\)/);
    assert.match(table.stdout.split('\n').find((l) => l.includes('flaky')) ?? '', /flaky.*-$/, 'no lateness check: no mark');
    assert.match(table.stdout, /1 LATE/);
    const status = await runCli(t, ['status']);
    assert.match(status.stdout, new RegExp(`late: nightly LATE since ${moment(late.lateSince!)}`));

    const listed = await events(t);
    const flakyEvents = listed.filter((e) => e.fetcher === 'flaky').map((e) => e.event);
    assert.deepEqual(flakyEvents, ['failed', 'recovered']);
    const lateEvent = listed.find((e) => e.event === 'late');
    assert.ok(lateEvent, 'a late event');
    assert.equal(lateEvent.fetcher, 'nightly');
    assert.equal(lateEvent.pool, 'cpu-analysis');
    assert.deepEqual(
      listed.map((e) => e.seq),
      [...listed.map((e) => e.seq)].sort((a, b) => a - b),
      'oldest first',
    );
    const human = await runCli(t, ['events']);
    assert.match(human.stdout, /failed\s+fetcher=flaky pool=network-light run=\S+ exit=1 reason=exit-code/);

    // The hook got each, with its variables and nothing else of the agent's environment.
    const hooked = await waitFor(
      () => {
        const files = envFiles(hookDir);
        const names = new Set(files.map((f) => f.vars.QUANTILICA_EVENT));
        return names.has('failed') && names.has('recovered') && names.has('late') ? files : null;
      },
      { what: 'the hook to get failed, recovered and late', timeoutMs: 20_000 },
    );
    const failedFlaky = hooked.find((f) => f.vars.QUANTILICA_EVENT === 'failed' && f.vars.QUANTILICA_FETCHER === 'flaky');
    assert.ok(failedFlaky);
    assert.equal(failedFlaky.vars.QUANTILICA_POOL, 'network-light');
    assert.equal(failedFlaky.vars.QUANTILICA_EXIT_CODE, '1');
    assert.equal(failedFlaky.vars.QUANTILICA_REASON, 'exit-code');
    assert.match(failedFlaky.vars.QUANTILICA_RUN_ID, /\S/);
    assert.ok(fs.existsSync(failedFlaky.vars.QUANTILICA_LOG_PATH), "the run's log path");
    const lateHook = hooked.find((f) => f.vars.QUANTILICA_EVENT === 'late');
    assert.equal(lateHook?.vars.QUANTILICA_FETCHER, 'nightly');
    assert.equal(lateHook?.vars.QUANTILICA_RUN_ID, '');
    for (const f of hooked) {
      assert.ok(!f.text.includes('ghp_never_in_a_hook'), "no secret in a hook's environment");
      assert.ok(!('QUANTILICA_CATALOG' in f.vars) && !('GITHUB_TOKEN' in f.vars));
    }

    // `events --follow` prints what happens next.
    const follower = spawn(process.execPath, [AGENT_JS, 'events', '--follow', '--json', '--limit', '1'], {
      env: t.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let followed = '';
    follower.stdout.on('data', (d: Buffer) => {
      followed += d.toString();
    });
    await waitFor(() => followed.includes('\n'), { what: 'the follower to print the last event', timeoutMs: 20_000 });
    fs.rmSync(okFile);
    assert.equal((await runCli(t, ['run', 'flaky'])).code, 1);
    await waitFor(() => followed.split('\n').some((l) => l.includes('"event":"failed"') && l.includes('"fetcher":"flaky"')), {
      what: 'the follower to print the new failure',
      timeoutMs: 20_000,
    });
    const followerExit = new Promise<number | null>((resolve) => follower.once('exit', (code) => resolve(code)));
    follower.kill('SIGINT');
    assert.equal(await followerExit, 0, 'Ctrl-C ends a follow cleanly');

    // /metrics, and nothing else on that port.
    const m = await scrape(port);
    assert.equal(m.status, 200);
    assert.match(m.type ?? '', /^text\/plain; version=0\.0\.4/);
    assert.equal(sample(m.text, 'quantilica_runs_finished_total', 'fetcher="flaky",outcome="failed"'), 2);
    assert.equal(sample(m.text, 'quantilica_runs_finished_total', 'fetcher="flaky",outcome="completed"'), 1);
    assert.equal(sample(m.text, 'quantilica_fetcher_late', 'fetcher="nightly"'), 1);
    assert.equal(sample(m.text, 'quantilica_pool_slots', 'pool="network-light"'), Number(t.env.CRON_POOL_NETWORK_LIGHT_SLOTS ?? 6));
    assert.ok((sample(m.text, 'quantilica_fetcher_last_success_timestamp_seconds', 'fetcher="flaky"') ?? 0) > 1.7e9);
    assert.equal((await scrape(port, '/')).status, 404);
    assert.equal((await scrape(port, '/metrics/../admin')).status, 404);
    const cli = await runCli(t, ['metrics']);
    assert.equal(cli.code, 0, cli.stderr);
    assert.equal(sample(cli.stdout, 'quantilica_runs_finished_total', 'fetcher="flaky",outcome="failed"'), 2);

    // A restart is no counter reset: the next agent starts from the run store.
    await stop(agent);
    const offline = await runCli(t, ['metrics']);
    assert.equal(offline.code, 0, offline.stderr);
    assert.equal(
      sample(offline.stdout, 'quantilica_runs_finished_total', 'fetcher="flaky",outcome="failed"'),
      2,
      'without an agent, from the run store',
    );
    agent = await startAgent(t);
    const after = await waitFor(
      async () => {
        try {
          return await scrape(port);
        } catch {
          return null;
        }
      },
      { what: "the restarted agent's /metrics", timeoutMs: 20_000 },
    );
    assert.equal(sample(after.text, 'quantilica_runs_finished_total', 'fetcher="flaky",outcome="failed"'), 2);
    assert.equal(sample(after.text, 'quantilica_runs_finished_total', 'fetcher="flaky",outcome="completed"'), 1);
    assert.ok((sample(after.text, 'quantilica_runs_finished_total', 'fetcher="nightly",outcome="failed"') ?? 0) >= 1);
  } finally {
    await stop(agent);
  }
});

test('a hook that hangs never delays a run', async () => {
  const port = await freePort();
  // Written aside and renamed: a listed file always holds its pid (an empty one would read as 0, our own group).
  const { t, hookDir } = station(
    'echo $$ > "$OUT/.$QUANTILICA_RUN_ID" && mv "$OUT/.$QUANTILICA_RUN_ID" "$OUT/$QUANTILICA_RUN_ID.pid"; exec sleep 120',
    port,
  );
  const agent = await startAgent(t);
  try {
    const runs: number[] = [];
    for (let i = 0; i < 6; i += 1) {
      const r = await runCli(t, ['run', 'flaky']);
      runs.push(r.code ?? -1);
    }
    assert.deepEqual(runs, [1, 1, 1, 1, 1, 1], 'every run ended with its own exit code');
    // While the runs went on, four hooks hung (the most at once) and none of them was waited for.
    const pids = await waitFor(
      () => {
        const files = fs.readdirSync(hookDir).filter((f) => f.endsWith('.pid'));
        return files.length >= 4 ? files.map((f) => Number(fs.readFileSync(path.join(hookDir, f), 'utf8'))) : null;
      },
      { what: 'four hooks to hang', timeoutMs: 20_000 },
    );
    assert.ok(
      pids.every((pid) => pid > 1),
      `a pid in each file, not ${pids.join(' ')}`,
    );
    const alive = pids.filter((pid) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    });
    assert.equal(alive.length, 4, 'four hung hooks at once, the rest queued');
  } finally {
    await stop(agent);
  }
});
