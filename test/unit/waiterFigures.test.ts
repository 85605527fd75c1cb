// The native waiter may add a run cgroup's end figures to the status file as a second line. The agent
// reads them, refuses a file it cannot read as a whole, and keeps them for a run whose cgroup it never
// adopted (the agent before it died after the waiter had removed the cgroup).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { MemoryCeilings } from '../../agent/memory/memoryCeilings';
import { readStatusFile } from '../../agent/runs/runProcess';
import { memoryLogger } from '../support/memoryLogger';

function statusOf(text: string) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-status-'));
  try {
    const file = path.join(dir, 'r.exit');
    fs.writeFileSync(file, text);
    return readStatusFile(file);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

test("a status file's second line carries the waiter's figures; anything else makes the status unknown", () => {
  assert.deepEqual(
    { ...statusOf('3\n'), endedAt: undefined },
    { exitCode: 3, signal: null, endedAt: undefined },
    'the one-line record of the wrapper and of a waiter without a cgroup is read as before',
  );
  const ended = statusOf('0\ncgroup 4194304 1500000 2\n');
  assert.equal(ended.exitCode, 0);
  assert.deepEqual(ended.cgroup, { peakBytes: 4194304, cpuNs: 1500000, oomKills: 2 });
  assert.deepEqual(statusOf('137\ncgroup 8192 - 0\n').cgroup, { peakBytes: 8192, cpuNs: null, oomKills: 0 }, 'no cpuacct folder: no CPU');
  assert.equal(statusOf('137\ncgroup 8192 - 0\n').signal, 'SIGKILL');
  for (const bad of ['0\ncgroup 1 2\n', '0\ncgroup 1 2 3', '0\ncgroup -1 2 3\n', '0\nsomething else\n', '0\ncgroup 1 2 3\nmore\n', '', '7'])
    assert.deepEqual(statusOf(bad), { exitCode: null, signal: null, unknown: true }, JSON.stringify(bad));
});

test('the figures of a run whose cgroup the waiter removed before this agent adopted it are its end figures', () => {
  const ceilings = new MemoryCeilings({
    pools: new Map([['heavy-io', 2048]]),
    reserveMb: 0,
    cgroupName: 'unused',
    homeDir: os.tmpdir(),
    logger: memoryLogger(),
    support: { kind: 'not-enforced', reason: 'disabled-by-setting' },
  });
  try {
    assert.equal(ceilings.release('runa0000-0123abcd'), null, 'nothing known of the run: no figures');
    ceilings.ended('runa0000-0123abcd', 'heavy-io', { peakBytes: 300 * 1024 * 1024, cpuNs: 2_500_000_000, oomKills: 1 });
    assert.deepEqual(ceilings.release('runa0000-0123abcd'), {
      memoryMb: null,
      peakMemoryMb: 300,
      cpuSeconds: 2.5,
      memoryLimitMb: 2048,
      memorySource: 'cgroup',
      oomKilled: true,
      oomKills: 1,
    });
    assert.equal(ceilings.release('runa0000-0123abcd'), null, 'released once');
  } finally {
    ceilings.close();
  }
});

test(
  'a status file is read only when it is a plain file of ours nobody else writes, never through a link, never waiting on a FIFO',
  { timeout: 10_000 },
  (t) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-status-'));
    t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
    const unknown = { exitCode: null, signal: null, unknown: true };
    const file = path.join(dir, 'r.exit');
    fs.writeFileSync(file, '0\ncgroup 4194304 1500000 0\n', { mode: 0o600 });
    assert.equal(readStatusFile(file).exitCode, 0);
    assert.equal(readStatusFile(file).endedAt?.getTime(), fs.statSync(file).mtime.getTime(), 'an adopted run ended at the file time');
    const link = path.join(dir, 'link.exit');
    fs.symlinkSync(file, link);
    assert.deepEqual(readStatusFile(link), unknown, 'a link is not followed');
    const fifo = path.join(dir, 'fifo.exit');
    execFileSync('mkfifo', [fifo]);
    assert.deepEqual(readStatusFile(fifo), unknown, 'a FIFO is refused at once (this call would hang otherwise)');
    fs.chmodSync(file, 0o622);
    assert.deepEqual(readStatusFile(file), unknown, 'a record others can write is no record');
    fs.chmodSync(file, 0o600);
    fs.writeFileSync(file, `0\n${'\n'.repeat(400)}`);
    assert.deepEqual(readStatusFile(file), unknown, 'longer than any record');
  },
);
