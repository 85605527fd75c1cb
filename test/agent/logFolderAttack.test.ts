import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { createRunLog, openRunLog } from '../../agent/runs/runLogFile';
import { UnsafeStationError } from '../../agent/station/unsafeStationError';
import { makeTestEnv, openOrchestrator, runCli, stopAll } from '../support/harness';
import { createUnprivilegedUser } from '../support/unprivilegedUser';
import { waitFor } from '../support/waitFor';

// Run logs where another account can write: the throwaway user `attacker` swaps a running log for a
// link to one of the victim's (our) private files, hoping the log cap cuts it or a log view shows it.
const attacker = createUnprivilegedUser('qtlog');
after(() => attacker.remove());

const sha = (file: string) => createHash('sha256').update(fs.readFileSync(file)).digest('hex');

function asAttacker(script: string): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = attacker.spawn('sh', ['-c', script], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    child.once('close', (code) => resolve({ code, stderr }));
  });
}

test('a log folder another account can write or owns is refused at start with the fix; nothing runs', { timeout: 60000 }, async () => {
  const t = makeTestEnv([{ name: 'quick', pool: 'network-light', argv: ['true'] }]);
  // DATA_DIR's log folder, writable by every account.
  const logDir = path.join(t.dataDir, 'logs');
  fs.mkdirSync(logDir, { recursive: true });
  fs.chmodSync(logDir, 0o777);
  const open = await runCli(t, ['run', 'quick']);
  assert.equal(open.code, 73, 'the run is refused as for an unsafe lock folder');
  assert.match(
    open.stderr,
    /DATA_DIR: .*logs is writable by every account \(mode 777\).*swap a running log.*Fix: chmod 700 -- /s,
    open.stderr,
  );
  assert.deepEqual(fs.readdirSync(logDir), [], 'no log was made there');

  // A configured log folder that the other account made (and owns).
  const foreign = path.join(t.root, 'shared-logs');
  fs.mkdirSync(foreign, { mode: 0o755 });
  fs.chownSync(foreign, attacker.uid, attacker.gid);
  const owned = await runCli({ ...t, env: { ...t.env, QUANTILICA_LOG_DIR: foreign } }, ['run', 'quick']);
  assert.equal(owned.code, 73);
  assert.match(owned.stderr, new RegExp(`QUANTILICA_LOG_DIR: ${foreign} is owned by uid ${attacker.uid}, not by you`), owned.stderr);
});

test(
  "a running log swapped for a link to the victim's private file: the cap and the tail work on the run's own descriptor; the victim's file is untouched",
  { timeout: 90000 },
  async () => {
    const t0 = makeTestEnv(null);
    const go = path.join(t0.root, 'go');
    const done = path.join(t0.root, 'done');
    const flooded = path.join(t0.root, 'flooded');
    const script = `echo started; while [ ! -e "$1" ]; do sleep 0.05; done; head -c 300000 /dev/zero | tr '\\0' x; : > "$3"; while [ ! -e "$2" ]; do sleep 0.05; done`;
    const t2 = makeTestEnv([{ name: 'writer', pool: 'network-light', argv: ['sh', '-c', script, 'writer', go, done, flooded] }]);
    const victim = path.join(t2.home, 'private.key');
    fs.writeFileSync(victim, 'secret\n'.repeat(40000), { mode: 0o600 }); // 280 KB: over the cap
    const before = sha(victim);
    const capBytes = 64 * 1024;
    const { orchestrator, runManager, close } = openOrchestrator(t2, { logCapBytes: capBytes });
    try {
      const run = await orchestrator.run('writer', [], 'cli');
      const running = await waitFor(
        () => {
          const r = runManager.get(run.runId);
          return r?.status === 'running' && r.logPath && fs.readFileSync(r.logPath, 'utf8').includes('started') ? r : null;
        },
        { what: 'the writer to run and log' },
      );
      const logPath = running.logPath!;
      const logDir = path.dirname(logPath);
      // The folder is opened to others while the run goes on (a chmod, a shared DATA_DIR): the attacker
      // moves the log aside and puts a link to the victim's key in its place.
      for (const dir of [t2.root, t2.dataDir, t2.home]) fs.chmodSync(dir, 0o711); // the attacker may pass, not list or read
      fs.chmodSync(logDir, 0o777);
      const swap = await asAttacker(`mv -- '${logPath}' '${logPath}.moved' && ln -s -- '${victim}' '${logPath}'`);
      assert.equal(swap.code, 0, swap.stderr);
      assert.ok(fs.lstatSync(logPath).isSymbolicLink());

      fs.writeFileSync(go, '');
      // The fetcher floods its log (300 KB against a cap of 64 KB): the cap cuts the run's own file.
      await waitFor(() => fs.existsSync(flooded) && fs.statSync(`${logPath}.moved`).size <= capBytes, {
        what: "the run's own log to be capped",
        timeoutMs: 30000,
      });
      // Copy-truncate: what the fetcher appends between the cut and the agent's one append lands before the marker.
      assert.match(
        fs.readFileSync(`${logPath}.moved`, 'utf8'),
        /^x*\[quantilica: log over its cap of 65536 bytes; \d+ earlier bytes dropped\]\nx+$/,
      );
      assert.equal(sha(victim), before, "the victim's file is untouched by the cap");
      assert.equal(fs.statSync(victim).size, 280000);
      const tail = await orchestrator.tailLog(run.runId, 1000);
      assert.match(tail.text, /^x{1000}$/, "the tail reads the run's log through its descriptor");
      assert.doesNotMatch(tail.text, /secret/, 'never the file the link points to');

      fs.writeFileSync(done, '');
      const ended = await orchestrator.waitRun(run.runId);
      assert.equal(ended.status, 'completed');
      assert.equal(sha(victim), before, "the last cap at the run's end does not touch it either");
      // Once the run ended its log is read by name only without following a link.
      await assert.rejects(
        orchestrator.tailLog(run.runId, 1000),
        (err: unknown) => err instanceof UnsafeStationError && /symbolic link/.test(err.message),
      );
    } finally {
      await stopAll(orchestrator, runManager);
      await close();
    }
  },
);

test('a run log is created only anew (O_EXCL, no link followed), and an existing one is opened only when it is a plain file of ours', () => {
  const t = makeTestEnv(null);
  const dir = path.join(t.root, 'logs');
  fs.mkdirSync(dir, { mode: 0o700 });
  const target = path.join(t.root, 'target');
  fs.writeFileSync(target, 'keep\n');
  fs.symlinkSync(target, path.join(dir, 'planted.log'));
  assert.throws(
    () => createRunLog(dir, 'planted.log', 'QUANTILICA_LOG_DIR'),
    (err: unknown) => err instanceof UnsafeStationError && /exists before its run started/.test(err.message),
  );
  assert.throws(
    () => openRunLog(path.join(dir, 'planted.log'), true),
    (err: unknown) => err instanceof UnsafeStationError && /symbolic link/.test(err.message),
  );
  assert.equal(fs.readFileSync(target, 'utf8'), 'keep\n');
  const fd = createRunLog(dir, 'fresh.log', 'QUANTILICA_LOG_DIR');
  try {
    assert.equal(fs.fstatSync(fd).mode & 0o7777, 0o600);
  } finally {
    fs.closeSync(fd);
  }
  fs.linkSync(path.join(dir, 'fresh.log'), path.join(dir, 'second-name.log'));
  assert.throws(() => openRunLog(path.join(dir, 'fresh.log'), false), /one link/);
  fs.chmodSync(dir, 0o777);
  assert.throws(() => createRunLog(dir, 'other.log', 'QUANTILICA_LOG_DIR'), /writable by every account/);
});
