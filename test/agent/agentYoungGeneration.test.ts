import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { connectAgent } from '../../agent/client/agentClient';
import { makeTestEnv, OUT_FIXTURES, startAgent, type TestEnv } from '../support/harness';
import { waitFor } from '../support/waitFor';

// The agent keeps V8's young generation small from its first module on (agent/memory/youngGeneration.ts):
// set later, the bundle's modules and a burst grow it to four to eight times its starting size, megabytes of
// RSS that stay committed after the burst.

const stations: TestEnv[] = [];
after(() => {
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

interface Probe {
  start: number;
  most: number;
  at: number;
}

test(
  "a burst of queued runs leaves the agent's young generation at most twice its size before its first module",
  { timeout: 120000 },
  async () => {
    const t = makeTestEnv([{ name: 'noop', pool: 'network-light', argv: ['/bin/true'] }]);
    stations.push(t);
    const probeFile = path.join(t.root, 'young-generation.json');
    t.env.NODE_OPTIONS = `--require ${path.join(OUT_FIXTURES, 'youngGenerationProbe.js')}`;
    t.env.YOUNG_GENERATION_PROBE = probeFile;
    const agent = await startAgent(t);
    try {
      const client = await connectAgent(path.join(t.home, '.quantilica', 'agent.json'), { client: 'young-generation-test' });
      try {
        const ended = await Promise.all(Array.from({ length: 300 }, async () => client.waitRun((await client.run('noop')).runId)));
        assert.equal(ended.filter((r) => r.status === 'completed').length, 300, 'every run of the burst completed');
      } finally {
        await client.close();
      }
      const burstEnded = Date.now();
      const probe = await waitFor(
        () => {
          const read = fs.existsSync(probeFile) ? (JSON.parse(fs.readFileSync(probeFile, 'utf8')) as Probe) : null;
          return read !== null && read.at > burstEnded ? read : null;
        },
        { what: 'the probe to sample the heap after the burst' },
      );
      assert.ok(probe.start > 0, 'V8 reports a new space');
      assert.ok(
        probe.most <= 2 * probe.start,
        `young generation ${probe.most} bytes at most, ${probe.start} before the first module (four to eight times that when the setting comes later)`,
      );
    } finally {
      agent.child.kill('SIGTERM');
      await new Promise((resolve) => agent.child.once('exit', resolve));
    }
  },
);
