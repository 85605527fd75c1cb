import * as path from 'node:path';
import { after, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { OUT_FIXTURES, listRuns, makeTestEnv, openOrchestrator, runCli, stopAll } from '../support/harness';
import { finishPayload, removeCgroupTree, uniqueCgroupName } from '../support/cgroups';

// An OOM kill inside a run whose fetcher exits 0 (its child was killed at the ceiling) is recorded and
// shown, not hidden by the exit code. Real cgroups: CI runs as root with the v1 memory controller.
const NAME = uniqueCgroupName('oomkills');
after(() => removeCgroupTree(NAME));

test(
  "a child OOM-killed at the run's ceiling while the fetcher exits 0: completed 0 with oomKills in the run, the store, the finish event, runs and status",
  { timeout: 120000 },
  async () => {
    const t = makeTestEnv(
      [
        // The parent (node, ~50 MB) stays under 192 MB; its child reaches for 400 MB and is the kernel's pick.
        {
          name: 'oom-child',
          pool: 'heavy-io',
          argv: [process.execPath, path.join(OUT_FIXTURES, 'allocateMemory.js'), '400', '--in-child'],
          memoryMb: 192,
        },
        { name: 'fits', pool: 'heavy-io', argv: [process.execPath, path.join(OUT_FIXTURES, 'allocateMemory.js'), '16'], memoryMb: 192 },
      ],
      { QUANTILICA_CGROUP_NAME: NAME },
    );
    const { orchestrator, runManager, store, close } = openOrchestrator(t);
    let runId: string;
    let fitsId: string;
    try {
      const enforcement = orchestrator.agentInfo().memory!;
      assert.notEqual(enforcement.kind, 'not-enforced', `cgroups must be usable as root here (${enforcement.reason ?? ''})`);
      const run = await orchestrator.run('oom-child', [], 'cli');
      runId = run.runId;
      const ended = await orchestrator.waitRun(run.runId);
      assert.equal(ended.status, 'completed', `ended ${ended.status} ${ended.reason ?? ''}`);
      assert.equal(ended.exitCode, 0);
      assert.ok((ended.oomKills ?? 0) >= 1, `the run carries its OOM kills (${String(ended.oomKills)})`);
      assert.equal(store.get(run.runId)?.oomKills, ended.oomKills, 'the run store keeps them');
      const finish = finishPayload(t.env.QUANTILICA_TELEMETRY_SPOOL!, run.runId)!;
      assert.equal(finish.oomKills, ended.oomKills, 'the finish event carries them');

      const fits = await orchestrator.waitRun((await orchestrator.run('fits', [], 'cli')).runId);
      fitsId = fits.runId;
      assert.equal(fits.status, 'completed');
      assert.equal(fits.oomKills, 0, 'a run without OOM kills says 0');
    } finally {
      await stopAll(orchestrator, runManager);
      await close();
    }
    // The views, read by the CLI from the store (no agent runs).
    const runs = await runCli(t, ['runs']);
    const line = runs.stdout.split('\n').find((l) => l.startsWith(runId)) ?? '';
    assert.match(line, /WARNING: \d+ process(es)? of the run killed at its memory ceiling \(OOM\)/, runs.stdout);
    assert.doesNotMatch(runs.stdout.split('\n').find((l) => l.startsWith(fitsId)) ?? '', /OOM/);
    assert.ok(((await listRuns(t)).find((r) => r.runId === runId)?.oomKills ?? 0) >= 1);
    const status = await runCli(t, ['status']);
    assert.match(
      status.stdout,
      new RegExp(
        `memory: WARNING: \\d+ process(es)? of the run killed at its memory ceiling \\(OOM\\): run ${runId} \\(oom-child\\) ended completed 0`,
      ),
      status.stdout,
    );
  },
);
