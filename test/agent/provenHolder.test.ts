import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { OwnerRecord } from '../../agent/slots/ownerRecord';
import { processUid, readProcInfo } from '../../shared/node/procInfo';
import { whyNotOurRun } from '../../agent/slots/provenHolder';
import { waitFor } from '../support/waitFor';

const always = () => true;
const never = () => false;

function recordOf(pid: number): OwnerRecord {
  return { pid, startTime: readProcInfo(pid)?.startTime ?? 0, fetcher: 'x', runId: 'r', since: '', agentPid: process.pid };
}

/** A detached process (its own group and session), waited until it runs as `uid` or holds `file` when given. */
async function detached(argv: string[], holds?: string, uid = 0): Promise<ChildProcess> {
  const child = spawn(argv[0], argv.slice(1), { detached: true, stdio: 'ignore' });
  await waitFor(
    () => {
      if (!holds) return processUid(child.pid!) === uid;
      const st = fs.statSync(holds);
      return fs.readdirSync(`/proc/${child.pid}/fd`).some((fd) => {
        try {
          const s = fs.statSync(`/proc/${child.pid}/fd/${fd}`);
          return s.ino === st.ino && s.dev === st.dev;
        } catch {
          return false;
        }
      });
    },
    { what: `${argv.join(' ')} to run`, timeoutMs: 10000 },
  );
  return child;
}

test('only a process proven to be our run may be signalled: each missing proof has its reason', { timeout: 60000 }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-proof-'));
  const file = path.join(dir, 'slot_0.lock');
  fs.writeFileSync(file, '', { mode: 0o600 });
  const id = fs.statSync(file);
  const holder = await detached(['flock', file, 'sleep', '600'], file);
  const stranger = await detached(['sleep', '600']);
  const nobody = await detached(['setpriv', '--reuid', '65534', '--regid', '65534', '--clear-groups', 'sleep', '600'], undefined, 65534);
  try {
    // flock(1) itself holds the file and leads its group: with the run store's word it is proven.
    assert.equal(whyNotOurRun(recordOf(holder.pid!), id, always), null);
    assert.equal(whyNotOurRun(recordOf(holder.pid!), id, never), 'not-a-recorded-run');
    assert.equal(whyNotOurRun({ ...recordOf(holder.pid!), startTime: 1 }, id, always), 'process-gone');
    assert.equal(whyNotOurRun(recordOf(stranger.pid!), id, always), 'lock-not-held-by-process');
    assert.equal(whyNotOurRun(recordOf(1), id, always), 'pid-out-of-range');
    assert.equal(whyNotOurRun({ ...recordOf(1), pid: 0 }, id, always), 'pid-out-of-range');
    assert.equal(whyNotOurRun(recordOf(nobody.pid!), id, always), 'foreign-uid');
    // The test process (in the group and session of its runner): never its own group or session.
    const self = readProcInfo(process.pid)!;
    const why = whyNotOurRun(recordOf(process.pid), id, always);
    assert.ok(why === 'own-group-or-session' || (why === 'not-group-leader' && self.pgid !== process.pid), `got ${why}`);
  } finally {
    // The groups, not the pids: flock(1) forks its command, which would outlive flock alone.
    for (const c of [holder, stranger, nobody]) process.kill(-c.pid!, 'SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
