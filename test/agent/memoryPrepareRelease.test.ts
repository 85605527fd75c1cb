import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { defaultCgroupName } from '../../agent/memory/defaultCgroupName';
import { MemoryCeilings } from '../../agent/memory/memoryCeilings';
import { memoryCgroup, removeCgroupTree } from '../support/cgroups';
import { memoryLogger } from '../support/memoryLogger';

// A run's cgroup folders are made off the main thread: a run released meanwhile (cancelled, the agent
// closing) must not leave them behind. Real v1 cgroups, as root.
test('a run released while its cgroup is being made leaves no cgroup and gets no cgroup environment', async (t) => {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-prepare-'));
  const name = defaultCgroupName(home);
  const ceilings = new MemoryCeilings({
    pools: new Map([['heavy-io', 256]]),
    reserveMb: 0,
    cgroupName: null,
    homeDir: home,
    logger: memoryLogger(),
  });
  t.after(() => {
    ceilings.close();
    removeCgroupTree(name);
    fs.rmSync(home, { recursive: true, force: true });
  });
  assert.notEqual(ceilings.support.kind, 'not-enforced', `cgroups must be usable as root here (${ceilings.enforcement().reason ?? ''})`);
  // A run prepared and awaited has its folder and the environment naming it.
  const kept = await ceilings.prepare('runk0000-0123abcd', 'heavy-io', 64);
  assert.match(kept.QUANTILICA_CGROUP_PROCS ?? '', /runk0000-0123abcd\/cgroup\.procs/);
  assert.equal(fs.existsSync(memoryCgroup(name, 'heavy-io', 'runk0000-0123abcd')), true);
  ceilings.release('runk0000-0123abcd');
  // Released before its folders are made: nothing is left, and the spawn would get no cgroup.
  const pending = ceilings.prepare('runr0000-0123abcd', 'heavy-io', 64);
  ceilings.release('runr0000-0123abcd');
  assert.deepEqual(await pending, {});
  assert.equal(fs.existsSync(memoryCgroup(name, 'heavy-io', 'runr0000-0123abcd')), false, 'no cgroup left for the released run');
  assert.equal(fs.existsSync(memoryCgroup(name, 'heavy-io', 'runk0000-0123abcd')), false, 'the released run before it was removed too');
});
