// Whether a run's process group still has members, asked at every run's end: a live group (a real
// process that leads its own group) has them, an empty one none, and asking leaves the process's
// error settings as they were.
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { runMembers } from '../../agent/process/runGroup';
import { readProcInfo } from '../../shared/node/procInfo';

test('a live run group has its members, an ended one none, and Error.stackTraceLimit is left as it was', async (t) => {
  const child = spawn('sleep', ['300'], { detached: true, stdio: 'ignore' });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  t.after(() => child.kill('SIGKILL'));
  const pid = child.pid!;
  const info = readProcInfo(pid);
  assert.ok(info !== null && info.pgid === pid, 'the child leads its own group');
  const group = { runId: 'probe', pgid: pid, startTime: info.startTime };

  const limit = Error.stackTraceLimit;
  assert.deepEqual(runMembers(group), [pid]);
  assert.equal(Error.stackTraceLimit, limit);

  child.kill('SIGKILL');
  await exited;
  assert.deepEqual(runMembers(group), [], 'no process is left in the group');
  assert.equal(Error.stackTraceLimit, limit, 'the limit is restored after the probe that found none');
  // The usual answer at a run's end costs no stack trace, and a stack trace still works afterwards.
  assert.match(new Error('after').stack ?? '', /runGroupProbe/);
});
