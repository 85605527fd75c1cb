import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { defaultCgroupName } from '../../agent/memory/defaultCgroupName';
import { MemoryCeilings } from '../../agent/memory/memoryCeilings';
import { memoryCgroup, removeCgroupTree } from '../support/cgroups';
import { memoryLogger } from '../support/memoryLogger';
import { removeAtExit } from '../support/removeAtExit';

// Two homes of one account (a station and a test suite, two agents) each have their own cgroup tree:
// an agent removes the leftover run cgroups of its own home only. Real cgroups: CI runs as root on a
// machine whose v1 memory controller we may write.
const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-homes-'));
removeAtExit(root);
const homeA = path.join(root, 'station', '.quantilica');
const homeB = path.join(root, 'suite', '.quantilica');
for (const home of [homeA, homeB]) fs.mkdirSync(home, { recursive: true });
const names = [defaultCgroupName(homeA), defaultCgroupName(homeB)];
after(() => {
  for (const name of names) removeCgroupTree(name);
});

function ceilings(homeDir: string, logger = memoryLogger()): MemoryCeilings {
  // Every leftover counts as old enough to sweep: the test does not wait out the minute a CLI run gets.
  return new MemoryCeilings({ pools: new Map([['heavy-io', 256]]), reserveMb: 0, cgroupName: null, homeDir, logger, freshSeconds: 0 });
}

test(
  "two homes of one account keep their cgroups apart: a sweep removes (and logs) only its own home's leftovers",
  { timeout: 60000 },
  async () => {
    const [nameA, nameB] = names;
    assert.notEqual(nameA, nameB, 'each home has its own cgroup name');
    assert.match(nameA, new RegExp(`^quantilica-${process.getuid!()}-[0-9a-f]{10}$`));
    assert.equal(
      defaultCgroupName(path.join(homeA, '..', '.quantilica')),
      nameA,
      "the name is the home's real path, however it is spelled",
    );

    // Each home's agent made a run cgroup and died before removing it (kill -9).
    const agentA = ceilings(homeA);
    assert.notEqual(agentA.support.kind, 'not-enforced', `cgroups must be usable as root here (${agentA.enforcement().reason ?? ''})`);
    await agentA.prepare('runa0000-0123abcd', 'heavy-io', 64);
    const agentB = ceilings(homeB);
    await agentB.prepare('runb0000-0123abcd', 'heavy-io', 64);
    const leftA = memoryCgroup(nameA, 'heavy-io', 'runa0000-0123abcd');
    const leftB = memoryCgroup(nameB, 'heavy-io', 'runb0000-0123abcd');
    assert.ok(fs.existsSync(leftA) && fs.existsSync(leftB), 'both run cgroups exist');

    // The suite's next agent knows none of these runs: it removes its own home's leftover only.
    const loggerB = memoryLogger();
    ceilings(homeB, loggerB).adoptLeftovers(() => false);
    assert.equal(fs.existsSync(leftB), false, "the suite's leftover is removed");
    assert.ok(fs.existsSync(leftA), "the station's run cgroup is not touched by the other home's agent");
    const removal = loggerB.records.find((r) => r.msg?.includes('removed the empty cgroup'));
    assert.ok(removal, 'the removal is logged');
    assert.equal((removal.obj as { cgroup?: string }).cgroup, leftB, 'with the path it removed');
    assert.equal(loggerB.records.filter((r) => r.msg?.includes('removed the empty cgroup')).length, 1, 'one removal, its own');

    // The station's own next agent removes the station's leftover.
    const loggerA = memoryLogger();
    const nextA = ceilings(homeA, loggerA);
    nextA.adoptLeftovers(() => false);
    assert.equal(fs.existsSync(leftA), false);
    assert.ok(loggerA.records.some((r) => (r.obj as { cgroup?: string }).cgroup === leftA));

    // A clean stop leaves no empty folders of the home behind.
    nextA.close();
    assert.equal(fs.existsSync(memoryCgroup(nameA)), false, "the home's empty cgroup tree is removed at close");
  },
);
