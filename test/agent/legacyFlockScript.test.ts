import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { connectAgent } from '../../agent/client/agentClient';
import { VerifiedDir } from '../../agent/station/openInVerifiedDir';
import { UnsafeStationError } from '../../agent/station/unsafeStationError';
import { AGENT_JS, makeTestEnv, OUT_FIXTURES, startAgent, testConfig } from '../support/harness';
import { maxConcurrent } from '../support/maxConcurrent';
import { waitFor } from '../support/waitFor';
import { execProcess } from '../support/execProcess';

const TIGHTENED = /had mode 644 .* tightened to 600/;

// The seed's migration path: a cron_fetch.sh of the same account takes slot 0 with util-linux flock
// (`9>slot_0.lock` under umask 022 makes the file 0644) while the agent and CLI runs use the pool.
test(
  'a legacy flock script holding slot 0 (file 0644) while 12 CLI and 12 agent runs share the pool: never more than 3 holders, every run exits 0',
  { timeout: 300000 },
  async (t) => {
    const shared = makeTestEnv(null);
    const logFile = path.join(shared.root, 'holders.log');
    const catalog = [
      { name: 'hold', pool: 'heavy-io' as const, argv: [process.execPath, path.join(OUT_FIXTURES, 'holdSlot.js'), logFile] },
    ];
    const station = makeTestEnv(catalog, {}, { lockDir: shared.lockDir });
    const cron = makeTestEnv(catalog, {}, { lockDir: shared.lockDir });
    const agent = await startAgent(station);
    let script: ReturnType<typeof execProcess> | null = null;
    try {
      const slot0 = path.join(shared.lockDir, 'heavy-io', 'slot_0.lock');
      assert.equal(fs.existsSync(slot0), false, "the script makes slot 0's file, as on a station where it ran first");
      // The script takes slot 0 again and again (1.5 s each, as cron_fetch.sh would for each of its
      // fetchers) until the test releases it, so it holds one slot while the runs go on.
      const release = path.join(shared.root, 'release');
      const body = `umask 022; while [ ! -e "$1" ]; do ( flock 9 && exec "${process.execPath}" "${path.join(OUT_FIXTURES, 'holdSlot.js')}" "${logFile}" 1500 ) 9>"$0/heavy-io/slot_0.lock" || exit 1; done`;
      script = execProcess('sh', ['-c', body, shared.lockDir, release], station.env);
      await waitFor(() => fs.existsSync(logFile) && fs.readFileSync(logFile, 'utf8').includes('start'), {
        what: 'the script to hold slot 0',
      });

      const client = await connectAgent(testConfig(station).connectionFile, { client: 'legacy-flock' });
      try {
        // The agent's first run tries slot 0 first: it finds the script's 0644 file, tightens and uses it.
        const first = await client.waitRun((await client.run('hold', ['100'])).runId);
        assert.equal(first.status, 'completed', `${first.status} ${first.reason ?? ''}`);
        assert.equal(fs.statSync(slot0).mode & 0o7777, 0o600, "slot 0's file was tightened to 0600");
        // Then 11 more agent runs at once (over a second each: two of them overlap beside the script),
        // and 12 CLI runs (three cron-style loops of 4, no agent of theirs).
        const agentRuns = Promise.all(
          Array.from({ length: 11 }, async (_, i) => client.waitRun((await client.run('hold', [String(1000 + i * 50)])).runId)),
        );
        const cliLoops = Array.from({ length: 3 }, () =>
          execProcess(
            'bash',
            [
              '-c',
              `for i in 1 2 3 4; do "${process.execPath}" "${AGENT_JS}" run hold -- $((150 + RANDOM % 100)) >/dev/null || exit 1; done`,
            ],
            cron.env,
          ),
        );
        const runs = [first, ...(await agentRuns)];
        assert.deepEqual(
          runs.map((r) => `${r.status} ${r.exitCode}`),
          Array.from({ length: 12 }, () => 'completed 0'),
          JSON.stringify(runs.map((r) => [r.status, r.reason])),
        );
        const cli = await Promise.all(cliLoops);
        for (const r of cli) assert.equal(r.code, 0, r.stderr);
        assert.equal(cli.filter((r) => TIGHTENED.test(r.stderr)).length, 0, 'the CLI runs found the file private already');
      } finally {
        await client.close();
        fs.writeFileSync(release, '');
      }
      const legacy = await script;
      assert.equal(legacy.code, 0, `the legacy script exits 0: ${legacy.stderr}`);
      assert.equal(
        agent
          .stderr()
          .split('\n')
          .filter((l) => TIGHTENED.test(l)).length,
        1,
        `the tightening is logged once: ${agent.stderr()}`,
      );

      const { max, starts, stops } = maxConcurrent(logFile);
      // The script's holds carry no pool and slot (it is no run of ours).
      const byScript = fs
        .readFileSync(logFile, 'utf8')
        .split('\n')
        .filter((l) => l.startsWith('start ') && l.endsWith(' undefined:undefined')).length;
      t.diagnostic(`${starts} holds (${byScript} by the script); at most ${max} holders at once`);
      assert.ok(byScript >= 1);
      assert.equal(starts, byScript + 12 + 12);
      assert.equal(stops, starts);
      assert.ok(max <= 3, `saw ${max} holders in a 3-slot pool`);
      assert.equal(max, 3, 'the runs never filled the pool beside the script, so this proved nothing');
    } finally {
      fs.writeFileSync(path.join(shared.root, 'release'), '');
      agent.child.kill('SIGTERM');
      await new Promise((resolve) => agent.child.once('exit', resolve));
      await script;
    }
  },
);

test('a too-open lock file is tightened only when it is ours in a folder only we can enter; else it stays refused and untouched', () => {
  const t = makeTestEnv(null);
  const uid = process.getuid!();
  const open = (dir: string, policy: Parameters<typeof VerifiedDir.open>[1], name: string) => {
    const heard: string[] = [];
    const verified = VerifiedDir.open(dir, policy, (file, mode) => heard.push(`${file} ${mode.toString(8)}`))!;
    try {
      const opened = verified.openFile(name, { create: true, write: true });
      if (opened) fs.closeSync(opened.fd);
      return heard;
    } finally {
      verified.close();
    }
  };
  const privateDir = path.join(t.root, 'private');
  fs.mkdirSync(privateDir, { mode: 0o700 });
  const mine = path.join(privateDir, 'slot_0.lock');
  fs.writeFileSync(mine, '', { mode: 0o644 });
  fs.chmodSync(mine, 0o644);
  assert.deepEqual(open(privateDir, { uid, group: null }, 'slot_0.lock'), [`${mine} 644`]);
  assert.equal(fs.statSync(mine).mode & 0o7777, 0o600);
  assert.deepEqual(open(privateDir, { uid, group: null }, 'slot_0.lock'), [], 'once private, nothing more to say');

  // Another account's file in our private folder (root may put one there): refused, mode kept.
  const foreign = path.join(privateDir, 'slot_1.lock');
  fs.writeFileSync(foreign, '', { mode: 0o644 });
  fs.chmodSync(foreign, 0o644);
  fs.chownSync(foreign, 65534, 65534);
  assert.throws(
    () => open(privateDir, { uid, group: null }, 'slot_1.lock'),
    (err: unknown) => err instanceof UnsafeStationError && err.reason === 'lock-file-unsafe' && /owned by uid 65534/.test(err.message),
  );
  assert.equal(fs.statSync(foreign).mode & 0o7777, 0o644);

  // Our file in a folder a lock group may enter: refused, mode kept.
  const groupDir = path.join(t.root, 'group');
  fs.mkdirSync(groupDir);
  fs.chownSync(groupDir, uid, 65534);
  fs.chmodSync(groupDir, 0o2770);
  const shared = path.join(groupDir, 'slot_0.lock');
  fs.writeFileSync(shared, '', { mode: 0o644 });
  fs.chmodSync(shared, 0o644);
  assert.throws(
    () => open(groupDir, { uid, group: { name: 'nogroup', gid: 65534 } }, 'slot_0.lock'),
    (err: unknown) => err instanceof UnsafeStationError && /has mode 644/.test(err.message),
  );
  assert.equal(fs.statSync(shared).mode & 0o7777, 0o644);
});
