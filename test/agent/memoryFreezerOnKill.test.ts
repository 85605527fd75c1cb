import * as assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { CgroupLayout } from '../../agent/memory/cgroupLayout';
import { detectCgroups } from '../../agent/memory/cgroupSupport';
import { removeCgroupTree, uniqueCgroupName } from '../support/cgroups';
import { waitFor } from '../support/waitFor';

// On v1 a run joins its memory and cpuacct cgroups only; its freezer cgroup is made when it must be
// killed with processes left, which are gathered into it (a forking one too) before the freeze.
// Real v1 cgroups, as root.
test('a v1 run has no freezer folder until it is killed; the kill gathers every process, forking ones too, and leaves no folder', async (t) => {
  const name = uniqueCgroupName('lazykill');
  const support = detectCgroups(name);
  t.after(() => removeCgroupTree(name));
  // The project's machines have the hybrid layout: the v1 memory, cpuacct and freezer controllers.
  assert.ok(
    support.kind === 'cgroup-v1' && support.freezerBase !== null,
    `v1 with a freezer must be usable as root here (${support.kind})`,
  );
  const layout = new CgroupLayout(support);
  layout.make(layout.dirsOf(), null, true);
  layout.make(layout.dirsOf('heavy-io'), 256, true);
  const quiet = layout.dirsOf('heavy-io', 'runq0000-0123abcd');
  await layout.makeRun(quiet, null);
  assert.equal(fs.existsSync(quiet.memory), true);
  assert.equal(quiet.freezer !== null && fs.existsSync(quiet.freezer), false, 'no freezer folder for a run that may never need one');
  assert.ok(!layout.procsFiles(quiet).includes(support.freezerBase), 'a run joins no freezer cgroup');
  // A run that ends with nothing left: no kill, and its folders go.
  assert.equal(layout.kill(quiet), 0);
  assert.equal(layout.remove(quiet), true);
  assert.equal(fs.existsSync(quiet.memory), false);

  // A run whose processes live on, one of them forking without pause: it joins as a fetcher does.
  const busy = layout.dirsOf('heavy-io', 'runb0000-0123abcd');
  await layout.makeRun(busy, null);
  const script = `for f in ${layout.procsFiles(busy).split(':').join(' ')}; do echo $$ > $f; done; while :; do sleep 30 & done`;
  const forker = spawn('sh', ['-c', script], { stdio: 'ignore', detached: true });
  const exited = new Promise<void>((resolve) => forker.once('exit', () => resolve()));
  t.after(() => {
    try {
      process.kill(-forker.pid!, 'SIGKILL');
    } catch {
      // Killed by the test already.
    }
  });
  await waitFor(() => layout.procs(busy).length >= 5, { what: 'the forking run to fill its cgroup' });
  const killed = layout.kill(busy);
  assert.ok(killed >= 5, `every process got its SIGKILL (${killed})`);
  await exited;
  await waitFor(() => layout.procs(busy).length === 0, { what: 'the cgroup to empty' });
  assert.equal(busy.freezer !== null && fs.existsSync(busy.freezer), true, 'the kill made the freezer folder');
  assert.equal(fs.readFileSync(path.join(busy.freezer!, 'freezer.state'), 'utf8').trim(), 'THAWED', 'and thawed it after the kills');
  assert.equal(layout.remove(busy), true);
  for (const dir of [busy.memory, busy.cpu, busy.freezer]) assert.equal(dir !== null && fs.existsSync(dir), false, `${dir} removed`);
});
