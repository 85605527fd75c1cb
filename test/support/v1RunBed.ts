import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { CgroupLayout } from '../../agent/memory/cgroupLayout';
import { detectCgroups } from '../../agent/memory/cgroupSupport';
import { removeCgroupTree, uniqueCgroupName } from './cgroups';
import { tryLockSlot } from './tryLockSlot';

/**
 * What a test that plays the agent needs to start runs into real v1 cgroups (as root): the test's own
 * cgroup base with a `heavy-io` pool (512 MB), a folder for status files, a held slot lock and a run
 * log. All of it is gone after the test.
 */
export function v1RunBed(t: { after(fn: () => void | Promise<void>): void }, tag: string) {
  const name = uniqueCgroupName(tag);
  const support = detectCgroups(name);
  t.after(() => removeCgroupTree(name));
  assert.equal(support.kind, 'cgroup-v1', 'the project machines have the v1 memory controller');
  const layout = new CgroupLayout(support);
  layout.make(layout.dirsOf(), null, true);
  layout.make(layout.dirsOf('heavy-io'), 512, true);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `qt-${tag}-`));
  const lockPath = path.join(dir, 'slot_0.lock');
  fs.writeFileSync(lockPath, '', { mode: 0o600 });
  const lock = tryLockSlot(lockPath)!;
  const logPath = path.join(dir, 'run.log');
  const logFd = fs.openSync(logPath, 'a', 0o600);
  t.after(() => {
    fs.closeSync(logFd);
    lock.closeOwnCopy();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { name, layout, dir, logPath, logFd, lockFd: lock.fd };
}
