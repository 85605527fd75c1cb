import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import type { CgroupDirs } from '../../agent/memory/cgroupLayout';
import { distFile } from '../../agent/paths';
import { NativeSpawner } from '../../agent/runs/nativeSpawner';
import { processSpawner } from '../../agent/runs/processSpawner';
import { readStatusFile } from '../../agent/runs/runProcess';
import { memoryLogger } from '../support/memoryLogger';
import { v1RunBed } from '../support/v1RunBed';
import { waitFor } from '../support/waitFor';

// While the agent lives, the native spawner's waiter ends a run's v1 cgroup itself when nothing of the
// run is left in it: it reads the figures the agent records into the status file's second line and
// removes the folders. With a process left it touches nothing: the agent does it all, as before.
// The test process plays the agent (the spawner's parent). Real v1 cgroups, as root.
test(
  "the waiter reads a run's cgroup figures into its status file and removes the cgroup, unless a process is left",
  { timeout: 60_000 },
  async (t) => {
    const { layout, dir, logFd, lockFd } = v1RunBed(t, 'waiterend');
    const spawner = new NativeSpawner(distFile('quantilica-spawner'), processSpawner, memoryLogger());
    const alive = setInterval(() => {}, 1000);
    t.after(async () => {
      clearInterval(alive);
      await spawner.close();
    });
    const run = async (runId: string, script: string): Promise<{ dirs: CgroupDirs; statusFile: string; pid: number }> => {
      const dirs = layout.dirsOf('heavy-io', runId);
      await layout.makeRun(dirs, null);
      const statusFile = path.join(dir, `${runId}.exit`);
      const proc = await spawner.spawn({
        wrapperPath: '',
        statusFile,
        cwd: dir,
        env: { PATH: process.env.PATH, QUANTILICA_CGROUP_PROCS: layout.procsFiles(dirs) },
        logFd,
        lockFd,
        argv: ['sh', '-c', script],
      });
      assert.equal(spawner.fallbackReason, null, 'the native spawner started the run');
      await proc.exited;
      return { dirs, statusFile, pid: proc.pid };
    };

    // A run that used memory and CPU and left nothing: its figures are in its status file, its cgroup gone.
    const quiet = await run(
      'runw0000-0123abcd',
      'x=$(head -c 4000000 /dev/zero | tr "\\0" a); i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done; exit 3',
    );
    const ended = readStatusFile(quiet.statusFile);
    assert.equal(ended.exitCode, 3);
    assert.ok(ended.cgroup, `the waiter's figures: ${fs.readFileSync(quiet.statusFile, 'utf8')}`);
    assert.ok(ended.cgroup.peakBytes > 1024 * 1024, `peak ${ended.cgroup.peakBytes} bytes`);
    assert.ok(ended.cgroup.cpuNs !== null && ended.cgroup.cpuNs > 0, `cpu ${ended.cgroup.cpuNs} ns`);
    assert.equal(ended.cgroup.oomKills, 0);
    for (const folder of [quiet.dirs.memory, quiet.dirs.cpu])
      assert.equal(fs.existsSync(folder!), false, `${folder} removed by the waiter`);

    // A run whose child lives on in the cgroup: the waiter leaves it, figures and folders, to the agent.
    const lingering = await run('runl0000-0123abcd', 'sleep 60 & echo $! > lingering.pid; exit 0');
    const left = readStatusFile(lingering.statusFile);
    assert.equal(left.exitCode, 0);
    assert.equal(left.cgroup, undefined, 'no figures while a process of the run is left');
    assert.equal(fs.readFileSync(lingering.statusFile, 'utf8'), '0\n');
    assert.ok(layout.procs(lingering.dirs).length > 0, 'the child is still in the cgroup');
    assert.equal(fs.existsSync(lingering.dirs.memory), true, 'the cgroup stays for the agent');
    assert.ok(layout.kill(lingering.dirs) > 0);
    await waitFor(() => layout.procs(lingering.dirs).length === 0, { what: 'the lingering child to die' });
    assert.equal(layout.endFigures(lingering.dirs).peakMb !== null, true, 'the agent still reads its figures');
    assert.equal(layout.remove(lingering.dirs), true);
  },
);
