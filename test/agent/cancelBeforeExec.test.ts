import * as fs from 'node:fs';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { runMembers } from '../../agent/process/runGroup';
import { readProcInfo } from '../../shared/node/procInfo';
import { makeTestEnv, openOrchestrator, stopAll } from '../support/harness';
import { waitFor } from '../support/waitFor';

// A cancel that arrives while the run's wrapper (runWrapper.sh) has set its traps but has not yet
// exec'd the fetcher: the SIGTERM must still reach the fetcher once it exists. The wrapper's search
// of a long PATH for `sleep` holds that window open for a while (tens of ms, more under load).
const LONG_PATH = `${Array.from({ length: 15000 }, (_, i) => `/x/${String(i).padStart(4, '0')}`).join(':')}:/usr/bin:/bin`;

/** SIGTERM (15) is caught: the wrapper's outer shell has run its `trap` (SigCgt in /proc/<pid>/status). */
function catchesTerm(pid: number): boolean {
  try {
    const m = /^SigCgt:\s+([0-9a-f]+)$/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m !== null && (BigInt(`0x${m[1]}`) & (1n << 14n)) !== 0n;
  } catch {
    return false;
  }
}

function cmdline(pid: number): string {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'latin1').split('\0').join(' ');
  } catch {
    return '';
  }
}

test(
  "a cancel sent before the wrapper exec'd the fetcher reaches the fetcher: it dies of SIGTERM, not of the grace period's SIGKILL",
  { timeout: 240000 },
  async (t) => {
    const graceSeconds = 20;
    const env = makeTestEnv([{ name: 'sleeper', pool: 'network-light', argv: ['sleep', '300'], env: { PATH: LONG_PATH } }], {
      QUANTILICA_CANCEL_GRACE_SECONDS: String(graceSeconds),
    });
    const { orchestrator, runManager, close } = openOrchestrator(env);
    let inWindow = 0;
    try {
      for (let attempt = 0; attempt < 10 && inWindow < 2; attempt++) {
        const run = await orchestrator.run('sleeper', [], 'cli');
        const pid = await waitFor(
          () => {
            const r = runManager.get(run.runId);
            return r?.pid && catchesTerm(r.pid) ? r.pid : null;
          },
          { what: 'the wrapper to set its traps', timeoutMs: 30000 },
        );
        const before = runMembers({ runId: run.runId, pgid: pid, startTime: readProcInfo(pid)?.startTime ?? 0 });
        const fetcherStarted = before.some((pid) => cmdline(pid).startsWith('sleep '));
        runManager.cancel(run.runId);
        const ended = await orchestrator.waitRun(run.runId);
        assert.equal(ended.status, 'cancelled');
        if (fetcherStarted) continue; // the cancel came after the exec: not the case under test
        inWindow++;
        assert.equal(
          ended.signal,
          'SIGTERM',
          `the fetcher died of ${String(ended.signal)} (exit ${String(ended.exitCode)}): the cancel's SIGTERM missed it`,
        );
        assert.equal(ended.exitCode, 143);
      }
      t.diagnostic(`${inWindow} cancels landed between the wrapper's trap and the fetcher's exec`);
      assert.ok(inWindow > 0, "no cancel landed before the fetcher's exec, so this proved nothing");
    } finally {
      await stopAll(orchestrator, runManager);
      await close();
    }
  },
);
