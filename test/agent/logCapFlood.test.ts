import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { makeTestEnv, runCli, startAgent } from '../support/harness';
import { waitFor } from '../support/waitFor';

const MB = 1024 * 1024;
/** The README's stated bound on how far a log may run past its cap (README, "Log cap"). */
const OVERSHOOT_BOUND = 96 * MB;

test('a fetcher flooding its log as fast as it can never gets its log past cap + the stated bound', { timeout: 120000 }, async (t) => {
  const station = makeTestEnv(null);
  const go = path.join(station.root, 'go');
  const floodMb = 1000;
  const catalog = path.join(station.root, 'flood-catalog.json');
  fs.writeFileSync(
    catalog,
    JSON.stringify({
      fetchers: [
        {
          name: 'flood',
          pool: 'network-light',
          argv: ['sh', '-c', `while [ ! -e ${go} ]; do sleep 0.05; done; head -c ${floodMb * MB} /dev/zero`],
        },
      ],
    }),
  );
  station.env.QUANTILICA_CATALOG = catalog;
  station.env.QUANTILICA_LOG_CAP_MB = '1';
  const agent = await startAgent(station);
  try {
    const r = await runCli(station, ['run', 'flood', '--detach', '--json']);
    assert.equal(r.code, 0, r.stderr);
    const runId = (JSON.parse(r.stdout) as RunInfo).runId;
    const logPath = path.join(station.dataDir, 'logs', `flood-${runId}.log`);
    const statusFile = path.join(station.home, '.quantilica', 'runs', `${runId}.exit`);
    await waitFor(() => fs.existsSync(logPath), { what: 'the run log to exist', timeoutMs: 20000 });
    fs.writeFileSync(go, '');
    // Sample the size as often as this otherwise idle process can, until the fetcher has ended.
    let max = 0;
    let samples = 0;
    const deadline = Date.now() + 90000;
    while (!fs.existsSync(statusFile) && Date.now() < deadline) {
      for (let i = 0; i < 200; i++) {
        max = Math.max(max, fs.statSync(logPath).size);
        samples++;
      }
      await new Promise((resolve) => setImmediate(resolve));
    }
    t.diagnostic(`${samples} samples, largest ${(max / MB).toFixed(1)} MB under a 1 MB cap while ${floodMb} MB were written`);
    assert.ok(fs.existsSync(statusFile), 'the flood ended');
    assert.ok(max <= MB + OVERSHOOT_BOUND, `the log reached ${(max / MB).toFixed(1)} MB, over 1 MB + ${OVERSHOOT_BOUND / MB} MB`);
    await waitFor(() => fs.statSync(logPath).size <= MB, { what: 'the final log to be within its cap' });
  } finally {
    agent.child.kill('SIGTERM');
    await new Promise((resolve) => agent.child.once('exit', resolve));
  }
});
