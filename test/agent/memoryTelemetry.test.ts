import * as path from 'node:path';
import { after, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { Flusher } from '../../agent/telemetry/flusher';
import { connect, usePostgres } from '../fixtures/telemetryTestBed';
import { OUT_FIXTURES, makeTestEnv, openOrchestrator } from '../support/harness';
import { removeCgroupTree, uniqueCgroupName } from '../support/cgroups';

// Memory ceilings: core.task_run gains peak_memory_mb and cpu_seconds (migration 002),
// filled by the flush from each run's finish event.
const pgdb = usePostgres();
const NAME = uniqueCgroupName('pgmem');
after(() => removeCgroupTree(NAME));

test(
  "the finish event's peak memory and CPU reach core.task_run, for a completed and a memory-limit run",
  { timeout: 120000 },
  async () => {
    const allocate = path.join(OUT_FIXTURES, 'allocateMemory.js');
    const t = makeTestEnv(
      [
        { name: 'fits', pool: 'heavy-io', argv: [process.execPath, allocate, '100'], memoryMb: 400 },
        { name: 'too-big', pool: 'heavy-io', argv: [process.execPath, allocate, '200'], memoryMb: 64 },
      ],
      { QUANTILICA_DATABASE_URL: pgdb.url, QUANTILICA_CGROUP_NAME: NAME },
    );
    const { orchestrator, spool, logger, close } = openOrchestrator(t);
    try {
      const fits = await orchestrator.waitRun((await orchestrator.run('fits', [], 'cli')).runId);
      const tooBig = await orchestrator.waitRun((await orchestrator.run('too-big', [], 'cli')).runId);
      assert.equal(fits.status, 'completed');
      assert.equal(tooBig.reason, 'memory-limit');
      const flusher = new Flusher({ spool, databaseUrl: pgdb.url, logger });
      const flushed = await flusher.flushNow(() => {});
      await flusher.close();
      assert.equal(flushed.error, null);
      const client = await connect(pgdb.url);
      try {
        const rows = (
          await client.query<{ run_id: string; status: string; reason: string | null; peak_memory_mb: number; cpu_seconds: number }>(
            'SELECT run_id, status, reason, peak_memory_mb, cpu_seconds FROM core.task_run WHERE run_id = ANY($1)',
            [[fits.runId, tooBig.runId]],
          )
        ).rows;
        const f = rows.find((r) => r.run_id === fits.runId)!;
        const b = rows.find((r) => r.run_id === tooBig.runId)!;
        assert.equal(f.peak_memory_mb, fits.peakMemoryMb);
        assert.ok(f.peak_memory_mb > 100 && f.peak_memory_mb < 400, `peak ${f.peak_memory_mb}`);
        assert.equal(f.cpu_seconds, fits.cpuSeconds);
        assert.ok(f.cpu_seconds > 0);
        assert.deepEqual([b.status, b.reason], ['failed', 'memory-limit']);
        assert.ok(b.peak_memory_mb > 0 && b.peak_memory_mb <= 64.5, `peak ${b.peak_memory_mb}`);
      } finally {
        await client.end();
      }
    } finally {
      await close();
    }
  },
);
