import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import type { CgroupDirs } from '../../agent/memory/cgroupLayout';
import { MemoryCeilings } from '../../agent/memory/memoryCeilings';
import { distFile } from '../../agent/paths';
import { NativeSpawner } from '../../agent/runs/nativeSpawner';
import { processSpawner } from '../../agent/runs/processSpawner';
import { readStatusFile } from '../../agent/runs/runProcess';
import { memoryCgroup, removeCgroupTree, uniqueCgroupName } from '../support/cgroups';
import { memoryLogger } from '../support/memoryLogger';
import { v1RunBed } from '../support/v1RunBed';

// A v1 run without a memory ceiling of its own gets its cgroup folders from the native spawner's
// waiter, not from the agent's main thread: the fetcher is still born inside them, and a spawn that
// goes to the fallback (runWrapper.sh joins, it does not make) has them made by the agent first.
// The test process plays the agent (the spawner's parent). Real v1 cgroups, as root.

/** The memory controller's line of a `/proc/PID/cgroup` text: the folder the process was in. */
function memoryFolderOf(text: string): string | undefined {
  return /^\d+:(?:[^:]*,)?memory(?:,[^:]*)?:(.*)$/m.exec(text)?.[1];
}

test(
  "the native spawner's waiter makes a run's missing v1 folders before the fetcher joins them, and removes them at its end",
  { timeout: 60_000 },
  async (t) => {
    const s = v1RunBed(t, 'waitermake');
    const spawner = new NativeSpawner(distFile('quantilica-spawner'), processSpawner, memoryLogger());
    // The agent's own handles keep it alive while a run goes on; here, this one.
    const alive = setInterval(() => {}, 1000);
    t.after(async () => {
      clearInterval(alive);
      await spawner.close();
    });
    const run = async (runId: string, dirs: CgroupDirs) => {
      const statusFile = path.join(s.dir, `${runId}.exit`);
      const proc = await spawner.spawn({
        wrapperPath: '',
        statusFile,
        cwd: s.dir,
        env: { PATH: process.env.PATH, QUANTILICA_CGROUP_PROCS: s.layout.procsFiles(dirs) },
        logFd: s.logFd,
        lockFd: s.lockFd,
        argv: ['sh', '-c', `cat /proc/self/cgroup > ${runId}.cgroup`],
      });
      assert.equal(spawner.fallbackReason, null, 'the native spawner started the run');
      assert.equal(spawner.makesRunFolders, true);
      return { exit: await proc.exited, statusFile, seen: path.join(s.dir, `${runId}.cgroup`) };
    };

    const dirs = s.layout.dirsOf('heavy-io', 'runm0000-0123abcd');
    assert.equal(fs.existsSync(dirs.memory), false, 'nobody made the folder before the spawn');
    const made = await run('runm0000-0123abcd', dirs);
    assert.deepEqual(made.exit, { exitCode: 0, signal: null }, fs.readFileSync(s.logPath, 'utf8'));
    assert.equal(memoryFolderOf(fs.readFileSync(made.seen, 'utf8')), `/${s.name}/heavy-io/runm0000-0123abcd`, 'the fetcher ran inside');
    const ended = readStatusFile(made.statusFile);
    assert.ok(ended.cgroup, `the waiter's figures: ${fs.readFileSync(made.statusFile, 'utf8')}`);
    for (const folder of [dirs.memory, dirs.cpu]) assert.equal(fs.existsSync(folder!), false, `${folder} removed by the waiter`);

    // A folder that cannot be made (its pool's is gone): the join fails, named on the run's log.
    const orphan = s.layout.dirsOf('no-such-pool', 'runo0000-0123abcd');
    const refused = await run('runo0000-0123abcd', orphan);
    assert.equal(refused.exit?.exitCode, 125);
    assert.match(
      fs.readFileSync(s.logPath, 'utf8'),
      /quantilica: could not join the run's cgroup .*no-such-pool\/runo0000-0123abcd\/cgroup\.procs: No such file or directory/,
    );
    assert.equal(fs.existsSync(refused.seen), false, 'the fetcher never ran');
  },
);

test(
  'a spawn the native spawner sends to the fallback has its folders made by the agent, and runWrapper.sh joins them',
  { timeout: 60_000 },
  async (t) => {
    const s = v1RunBed(t, 'fallbackmake');
    const spawner = new NativeSpawner(path.join(s.dir, 'not-built'), processSpawner, memoryLogger());
    // The agent's own handles keep it alive while a run goes on; here, this one.
    const alive = setInterval(() => {}, 1000);
    t.after(async () => {
      clearInterval(alive);
      await spawner.close();
    });
    assert.equal(spawner.makesRunFolders, false, 'a spawner that was not built makes no folder');
    const dirs = s.layout.dirsOf('heavy-io', 'runf0000-0123abcd');
    const proc = await spawner.spawn({
      wrapperPath: distFile('runWrapper.sh'),
      statusFile: path.join(s.dir, 'runf0000-0123abcd.exit'),
      cwd: s.dir,
      env: { PATH: process.env.PATH, QUANTILICA_CGROUP_PROCS: s.layout.procsFiles(dirs) },
      logFd: s.logFd,
      lockFd: s.lockFd,
      argv: ['sh', '-c', 'cat /proc/self/cgroup > fallback.cgroup'],
    });
    assert.equal(spawner.fallbackReason, 'not-built');
    assert.deepEqual(await proc.exited, { exitCode: 0, signal: null }, fs.readFileSync(s.logPath, 'utf8'));
    assert.equal(memoryFolderOf(fs.readFileSync(path.join(s.dir, 'fallback.cgroup'), 'utf8')), `/${s.name}/heavy-io/runf0000-0123abcd`);
    assert.equal(s.layout.remove(dirs), true);
  },
);

test("the memory ceilings leave a run's folders to a spawner that makes them only when nothing must be written first", async (t) => {
  const name = uniqueCgroupName('leavemake');
  let spawnerMakes = true;
  const ceilings = new MemoryCeilings({
    pools: new Map([['heavy-io', 256]]),
    reserveMb: 0,
    cgroupName: name,
    homeDir: os.tmpdir(),
    logger: memoryLogger(),
    spawnerMakesRunFolders: () => spawnerMakes,
  });
  t.after(() => {
    ceilings.close();
    removeCgroupTree(name);
  });
  assert.equal(ceilings.support.kind, 'cgroup-v1');
  const folder = (runId: string) => memoryCgroup(name, 'heavy-io', runId);
  const limitOf = (runId: string) => fs.readFileSync(path.join(folder(runId), 'memory.limit_in_bytes'), 'utf8').trim();

  // No ceiling of its own: the environment names the folder, which the spawner will make.
  const left = await ceilings.prepare('runa0000-0123abcd', 'heavy-io', undefined);
  assert.match(left.QUANTILICA_CGROUP_PROCS ?? '', /heavy-io\/runa0000-0123abcd\/cgroup\.procs/);
  assert.equal(fs.existsSync(folder('runa0000-0123abcd')), false, 'left to the spawner');

  // Its own ceiling: made here, with the ceiling written before any process joins.
  const limited = await ceilings.prepare('runb0000-0123abcd', 'heavy-io', 64);
  assert.match(limited.QUANTILICA_CGROUP_PROCS ?? '', /runb0000-0123abcd/);
  assert.equal(limitOf('runb0000-0123abcd'), String(64 * 1024 * 1024));

  // A folder there already is the agent's to reset, as before: an earlier agent's, taken over at start,
  fs.mkdirSync(folder('runc0000-0123abcd'));
  fs.writeFileSync(path.join(folder('runc0000-0123abcd'), 'memory.limit_in_bytes'), String(32 * 1024 * 1024));
  ceilings.adoptLeftovers((runId) => runId === 'runc0000-0123abcd');
  await ceilings.prepare('runc0000-0123abcd', 'heavy-io', undefined);
  assert.notEqual(limitOf('runc0000-0123abcd'), String(32 * 1024 * 1024), "the earlier agent's ceiling is gone");
  // and an earlier try's that its release could not remove (a child cgroup keeps it, as a process would).
  await ceilings.prepare('rune0000-0123abcd', 'heavy-io', undefined);
  fs.mkdirSync(path.join(folder('rune0000-0123abcd'), 'kept'), { recursive: true });
  fs.writeFileSync(path.join(folder('rune0000-0123abcd'), 'memory.limit_in_bytes'), String(32 * 1024 * 1024));
  ceilings.release('rune0000-0123abcd');
  assert.equal(fs.existsSync(folder('rune0000-0123abcd')), true, 'the release could not remove it');
  await ceilings.prepare('rune0000-0123abcd', 'heavy-io', undefined);
  assert.notEqual(limitOf('rune0000-0123abcd'), String(32 * 1024 * 1024), "the earlier try's ceiling is gone");

  // A spawner that no longer makes folders (the native one fell back): made here.
  spawnerMakes = false;
  await ceilings.prepare('rund0000-0123abcd', 'heavy-io', undefined);
  assert.equal(fs.existsSync(folder('rund0000-0123abcd')), true);
  for (const runId of ['runb0000-0123abcd', 'runc0000-0123abcd', 'rund0000-0123abcd', 'rune0000-0123abcd']) ceilings.release(runId);
});
