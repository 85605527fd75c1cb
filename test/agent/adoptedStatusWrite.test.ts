import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { RunInfo } from '../../shared/protocol';
import { readProcInfo } from '../../shared/node/procInfo';
import { FIXTURES, groupMembers, listRuns, makeTestEnv, runCli, startAgent } from '../support/harness';
import { waitFor } from '../support/waitFor';

// The native spawner's waiter writes a run's status file, and it is not in the run's group: a fetcher
// can be gone (a zombie its stopped waiter has yet to reap) while its status is still unwritten.
test(
  'native spawner: an adopted run whose fetcher is gone before its waiter wrote the status gets the exit code once it is written',
  { timeout: 120000 },
  async () => {
    const station = makeTestEnv([{ name: 'until-file', pool: 'heavy-io', argv: [path.join(FIXTURES, 'exitWhenFileExists.sh')] }], {
      QUANTILICA_SPAWNER: 'native',
    });
    const release = path.join(station.root, 'release');
    const first = await startAgent(station);
    const started = await runCli(station, ['run', 'until-file', '--detach', '--json', '--', release, '7']);
    assert.equal(started.code, 0, started.stderr);
    const runId = (JSON.parse(started.stdout) as RunInfo).runId;
    const running = await waitFor(
      async () => {
        const r = (await listRuns(station)).find((x) => x.runId === runId);
        return r?.status === 'running' && groupMembers(r.pid!).length >= 1 ? r : null;
      },
      { what: 'the fetcher to run', timeoutMs: 20000 },
    );
    const fetcher = running.pid!;
    const waiter = readProcInfo(fetcher)!.ppid;
    const spawner = readProcInfo(waiter)!.ppid;
    assert.equal(readProcInfo(spawner)?.ppid, first.child.pid, "the waiter's parent is the agent's spawner");

    first.child.kill('SIGKILL');
    await new Promise((resolve) => first.child.once('exit', resolve));
    process.kill(spawner, 'SIGKILL');
    // Stopped, the waiter cannot reap the fetcher nor write its status.
    process.kill(waiter, 'SIGSTOP');
    await waitFor(() => readProcInfo(waiter)?.state === 'T', { what: 'the waiter to stop' });
    const statusFile = path.join(station.home, '.quantilica', 'runs', `${runId}.exit`);
    try {
      fs.writeFileSync(release, '');
      await waitFor(() => readProcInfo(fetcher)?.state === 'Z', { what: 'the fetcher to end (a zombie of its stopped waiter)' });
      assert.equal(fs.existsSync(statusFile), false, 'no status yet');

      const second = await startAgent(station);
      try {
        // Ready comes after the adoption: the next agent has found the run's group empty and no status.
        process.kill(waiter, 'SIGCONT');
        await waitFor(() => fs.existsSync(statusFile) && fs.readFileSync(statusFile, 'utf8').endsWith('\n'), {
          what: 'the waiter to write the status',
        });
        const ended = await waitFor(
          async () => {
            const r = (await listRuns(station)).find((x) => x.runId === runId);
            return r && r.status !== 'running' ? r : null;
          },
          { what: 'the run to be finished by the next agent', timeoutMs: 20000 },
        );
        assert.deepEqual([ended.status, ended.exitCode, ended.reason], ['failed', 7, 'exit-code']);
        assert.equal(Date.parse(ended.finishedAt!), fs.statSync(statusFile).mtime.getTime(), "finishedAt is the status file's time");
      } finally {
        second.child.kill('SIGTERM');
        await new Promise((resolve) => second.child.once('exit', resolve));
      }
    } finally {
      if (readProcInfo(waiter)) process.kill(waiter, 'SIGCONT');
    }
  },
);
