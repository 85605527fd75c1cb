import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { ChangedParams, DiskStatus, WaitReason } from '../../shared/protocol';
import type { DiskConfig } from '../../agent/config/config';
import { DiskGate } from '../../agent/disk/diskGate';
import { statfsProbe, type DiskProbe } from '../../agent/disk/diskProbe';
import { BYTES_PER_GB } from '../../agent/disk/diskState';
import { memoryLogger } from '../support/memoryLogger';
import { RunRefusedError } from '../../agent/errors';
import type { GateRequest } from '../../agent/runs/startGate';
import { StateHub } from '../../agent/state/stateHub';
import { waitFor } from '../support/waitFor';

// Tiny thresholds: any test machine has a few MB free, so the real /tmp filesystem reads `ok`.
const tiny: DiskConfig = { pauseGb: 0.001, warnGb: 0.002, resumeGb: 0.003, pollSeconds: 0.02, maxWaitSeconds: 30 };
// Thresholds above any real disk: the real filesystem reads `paused`.
const huge: DiskConfig = { pauseGb: 100000, warnGb: 100001, resumeGb: 100002, pollSeconds: 0.02, maxWaitSeconds: 0.3 };

function tempDir(t: { after(fn: () => void): void }): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'diskgate-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A run at the gate, recording what the gate told it and how it ended. */
function arrive(gate: DiskGate, request: GateRequest, signal = new AbortController().signal) {
  const run = { reasons: [] as WaitReason[], admitted: false, refused: null as unknown, done: Promise.resolve() };
  run.done = gate
    .waitToStart(request, signal, (r) => run.reasons.push(r))
    .then(
      () => {
        run.admitted = true;
      },
      (err: unknown) => {
        run.refused = err;
      },
    );
  return run;
}

const req = (runId: string, fetcher: string, expectedBytes: number | null = null): GateRequest => ({ runId, fetcher, expectedBytes });

function hubRecorder() {
  const hub = new StateHub(() => {
    throw new Error('snapshot not used in this test');
  });
  const disk: DiskStatus[] = [];
  hub.onChange((p: ChangedParams) => {
    if (p.change.kind === 'disk') disk.push(p.change.disk);
  });
  return { hub, disk };
}

test('a probe failure gives unknown with a clear error and no start; the gate recovers by itself', async (t) => {
  const dataDir = path.join(tempDir(t), 'data');
  fs.mkdirSync(dataDir);
  const logger = memoryLogger();
  const gate = new DiskGate({ dataDir, disk: tiny, logger });
  t.after(() => gate.close());
  assert.equal((await gate.start()).state, 'ok');

  fs.rmSync(dataDir, { recursive: true });
  const s = await gate.checkNow();
  assert.equal(s.state, 'unknown');
  assert.equal(s.freeGb, null, 'never a made-up number');
  assert.equal(s.next, null);
  assert.match(s.error ?? '', /cannot measure free space of DATA_DIR .*\/data: ENOENT/);
  assert.ok(logger.records.some((r) => r.level === 'error' && /disk gate unknown: no fetcher starts; .*ENOENT/.test(r.msg ?? '')));

  const run = arrive(gate, req('r1', 'anac'));
  await waitFor(() => run.reasons.find((r) => r.kind === 'disk' && r.state === 'unknown'), { what: 'the run to wait on unknown' });
  await gate.checkNow();
  assert.equal(run.admitted, false, 'no fetcher starts while the disk is unknown');

  fs.mkdirSync(dataDir);
  await waitFor(() => run.admitted, { what: 'the run to start once the probe works again' });
  assert.equal(gate.status().state, 'ok');
  assert.equal(gate.status().error, null);
  assert.equal(fs.existsSync(path.join(dataDir, '.backpressure')), false);
});

test('an impossible measurement from the probe is unknown, not a number', async (t) => {
  const probe: DiskProbe = () => Promise.resolve({ freeBytes: Number.NaN, totalBytes: 1 });
  const gate = new DiskGate({ dataDir: tempDir(t), disk: tiny, logger: memoryLogger(), probe });
  t.after(() => gate.close());
  const s = await gate.start();
  assert.equal(s.state, 'unknown');
  assert.equal(s.freeGb, null);
  assert.match(s.error ?? '', /impossible measurement/);
});

test('a run waiting past CRON_DISK_MAX_WAIT_SECONDS fails with disk-backpressure-timeout and frees its place', async (t) => {
  const dataDir = tempDir(t);
  const gate = new DiskGate({ dataDir, disk: huge, logger: memoryLogger() });
  t.after(() => gate.close());
  assert.equal((await gate.start()).state, 'paused');
  const run = arrive(gate, req('r1', 'anac'));
  await run.done;
  assert.ok(run.refused instanceof RunRefusedError, `refused with ${String(run.refused)}`);
  assert.equal(run.refused.reason, 'disk-backpressure-timeout');
  assert.match(run.refused.message, /waited 0.3 s \(CRON_DISK_MAX_WAIT_SECONDS\) at the disk gate: state paused/);
  assert.equal(gate.waiting(), 0);
});

test('a run that can never fit fails at once with admission-impossible and the numbers; the runs behind it start', async (t) => {
  const dataDir = tempDir(t);
  const { totalBytes } = await statfsProbe(dataDir);
  const gate = new DiskGate({ dataDir, disk: tiny, logger: memoryLogger() });
  t.after(() => gate.close());
  await gate.start();
  // More than the whole filesystem holds: no free space it could ever have would admit it.
  const big = arrive(gate, req('big', 'rfb-cnpj', totalBytes * 2));
  const next = arrive(gate, req('next', 'sidra'));
  await big.done;
  assert.ok(big.refused instanceof RunRefusedError, `refused with ${String(big.refused)}`);
  assert.equal(big.refused.reason, 'admission-impossible');
  assert.match(
    big.refused.message,
    /run expects [\d.]+ GB .*holds [\d.]+ GB in total and the gate keeps 0.001 GB free \(CRON_DISK_PAUSE_GB\): at most [\d.]+ GB can ever be admitted/,
  );
  await waitFor(() => next.admitted, { what: 'the next run to start' });
  assert.equal(gate.waiting(), 0);
});

test('a run that does not fit now waits without blocking the runs behind it; an aborted wait rejects at once', async (t) => {
  const dataDir = tempDir(t);
  const { freeBytes, totalBytes } = await statfsProbe(dataDir);
  const gate = new DiskGate({ dataDir, disk: tiny, logger: memoryLogger() });
  t.after(() => gate.close());
  await gate.start();
  // Fits the filesystem (half of the used space would have to go), not today's free space.
  const big = Math.floor(freeBytes - tiny.pauseGb * BYTES_PER_GB + (totalBytes - freeBytes) / 2);
  const abort = new AbortController();
  const waiting = arrive(gate, req('big', 'rfb-cnpj', big), abort.signal);
  const small = arrive(gate, req('small', 'sidra'));
  await waitFor(() => small.admitted, { what: 'the small run to start while the big one waits' });
  await waitFor(() => waiting.reasons.find((r) => r.kind === 'admission'), { what: 'the big run to wait for admission' });
  assert.equal(waiting.admitted, false);
  abort.abort(new Error('cancelled by the operator'));
  await waiting.done;
  assert.match(String(waiting.refused), /cancelled by the operator/);
  assert.equal(gate.waiting(), 0);
});

test('admission: two heavy fetchers each declaring over half of the space above pause do not start together', async (t) => {
  const dataDir = tempDir(t);
  const { freeBytes } = await statfsProbe(dataDir);
  const share = Math.ceil(0.6 * (freeBytes - tiny.pauseGb * BYTES_PER_GB));
  const gate = new DiskGate({ dataDir, disk: tiny, logger: memoryLogger() });
  t.after(() => gate.close());
  await gate.start();

  const a = arrive(gate, req('a', 'datasus', share));
  await waitFor(() => a.admitted, { what: 'the first heavy run to be admitted' });
  gate.runStarted(req('a', 'datasus', share));
  const b = arrive(gate, req('b', 'rfb-cnpj', share));
  const reason = await waitFor(() => b.reasons.find((r) => r.kind === 'admission'), { what: 'the second heavy run to wait for admission' });
  assert.ok(reason.kind === 'admission' && reason.reservedGb > 0, JSON.stringify(reason));
  await gate.checkNow();
  assert.equal(b.admitted, false, 'the second heavy run must not start while the first may still write its share');

  gate.runEnded('a');
  await waitFor(() => b.admitted, { what: 'the second heavy run to start after the first ended' });
});

test('a flag left from before is removed when a fresh measurement says ok, and written while paused', async (t) => {
  const dataDir = tempDir(t);
  const flag = path.join(dataDir, '.backpressure');
  fs.writeFileSync(flag, 'left by the shell orchestrator\n');
  const okGate = new DiskGate({ dataDir, disk: tiny, logger: memoryLogger() });
  await okGate.start();
  await okGate.close();
  assert.equal(fs.existsSync(flag), false, 'the gate trusts its own measurement, not a saved state');

  const pausedGate = new DiskGate({ dataDir, disk: huge, logger: memoryLogger() });
  t.after(() => pausedGate.close());
  await pausedGate.start();
  assert.equal((JSON.parse(fs.readFileSync(flag, 'utf8')) as { state: string }).state, 'paused');
});

test('disk changes are published on a change that matters, not on every identical poll', async (t) => {
  let free = 50 * BYTES_PER_GB;
  let calls = 0;
  const probe: DiskProbe = () => {
    calls += 1;
    return Promise.resolve({ freeBytes: free, totalBytes: 100 * BYTES_PER_GB });
  };
  const { hub, disk } = hubRecorder();
  const gate = new DiskGate({
    dataDir: tempDir(t),
    disk: { ...tiny, warnGb: 25, pauseGb: 10, resumeGb: 35 },
    logger: memoryLogger(),
    hub,
    probe,
  });
  t.after(() => gate.close());
  await gate.start();
  await waitFor(() => calls >= 5, { what: 'five polls' });
  assert.equal(disk.length, 1);
  assert.deepEqual(disk[0].next, { threshold: 'warn', gb: 25, distanceGb: 25 });

  free -= 0.001 * BYTES_PER_GB; // 1 MB on a 100 GB disk: below the publishing step
  const seen = calls;
  await waitFor(() => calls >= seen + 3, { what: 'three more polls' });
  assert.equal(disk.length, 1);

  free = 20 * BYTES_PER_GB;
  await waitFor(() => disk.length === 2, { what: 'a change to be published' });
  assert.equal(disk[1].state, 'warn');
  assert.deepEqual(disk[1].next, { threshold: 'warn', gb: 25, distanceGb: 5 });
});
