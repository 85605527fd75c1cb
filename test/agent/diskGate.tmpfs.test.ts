import { test, type TestContext } from 'node:test';
import * as assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import type { WaitReason } from '../../shared/protocol';
import type { DiskConfig } from '../../agent/config/config';
import { dirUsage } from '../../agent/disk/dirUsage';
import { DiskGate } from '../../agent/disk/diskGate';
import type { DiskProbe } from '../../agent/disk/diskProbe';
import { memoryLogger } from '../support/memoryLogger';
import type { GateRequest } from '../../agent/runs/startGate';
import { waitFor } from '../support/waitFor';

const run = promisify(execFile);
const MiB = 1024 * 1024;
const FS_MB = 300;

interface SmallFs {
  dir: string;
  /** Set when no mount was possible: free space is then total minus what the files use. */
  probe: DiskProbe | undefined;
  /** Runs `close` before the filesystem is unmounted (a gate writing its flag keeps it busy). */
  closeFirst(close: () => Promise<void>): void;
}

/**
 * A real tmpfs of FS_MB, mounted for the test (needs root). Where mounting is not allowed, the same
 * scenario runs on a plain directory with a probe that counts its files against FS_MB, and the
 * test says so in its output: the scenario must not pass silently without a real filesystem.
 */
function smallFs(t: TestContext): SmallFs {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'diskgate-tmpfs-'));
  const closers: Array<() => Promise<void>> = [];
  const closeFirst = (close: () => Promise<void>) => {
    closers.push(close);
  };
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${FS_MB}m`, 'tmpfs', dir], { stdio: 'pipe' });
    t.after(async () => {
      for (const close of closers) await close();
      execFileSync('umount', [dir]);
      fs.rmdirSync(dir);
    });
    t.diagnostic(`real tmpfs of ${FS_MB} MB mounted at ${dir}`);
    return { dir, probe: undefined, closeFirst };
  } catch (err) {
    t.after(async () => {
      for (const close of closers) await close();
      fs.rmSync(dir, { recursive: true, force: true });
    });
    const stderr = (err as { stderr?: Buffer }).stderr?.toString().trim();
    const why = stderr || (err instanceof Error ? err.message.split('\n')[0] : String(err));
    t.diagnostic(`NO MOUNT POSSIBLE (${why}): this scenario ran on an INJECTED PROBE counting file usage, not on a real filesystem`);
    const probe: DiskProbe = async (p) => ({ freeBytes: FS_MB * MiB - (await dirUsage(p)), totalBytes: FS_MB * MiB });
    return { dir, probe, closeFirst };
  }
}

/** A fetcher writing `mb` MB into its data dir: a real child process, not the test's own writes. */
async function fetcherWrites(dataDir: string, fetcher: string, file: string, mb: number): Promise<string> {
  const dir = path.join(dataDir, fetcher);
  fs.mkdirSync(dir, { recursive: true });
  const target = path.join(dir, file);
  await run('dd', ['if=/dev/zero', `of=${target}`, 'bs=1M', `count=${mb}`, 'status=none']);
  return target;
}

function arrive(gate: DiskGate, request: GateRequest) {
  const r = { reasons: [] as WaitReason[], admitted: false, error: null as unknown };
  gate
    .waitToStart(request, new AbortController().signal, (reason) => r.reasons.push(reason))
    .then(
      () => {
        r.admitted = true;
      },
      (err: unknown) => {
        r.error = err;
      },
    );
  return r;
}

test('a fetcher fills a real small filesystem: warn, pause, hysteresis, release, in order', async (t) => {
  const small = smallFs(t);
  // On a 0.29 GB filesystem: warn below 153 MB free, pause below 82 MB, resume at 205 MB.
  const disk: DiskConfig = { warnGb: 0.15, pauseGb: 0.08, resumeGb: 0.2, pollSeconds: 0.05, maxWaitSeconds: 60 };
  const logger = memoryLogger();
  const gate = new DiskGate({ dataDir: small.dir, disk, logger, probe: small.probe });
  small.closeFirst(() => gate.close());
  const flag = path.join(small.dir, '.backpressure');

  assert.equal((await gate.start()).state, 'ok');
  assert.equal(fs.existsSync(flag), false);

  const part1 = await fetcherWrites(small.dir, 'anac', 'part1', 160); // ~140 MB free
  await waitFor(() => gate.status().state === 'warn', { what: 'the gate to warn' });
  assert.ok(fs.existsSync(flag), 'the flag exists at warn');
  const duringWarn = arrive(gate, { runId: 'w1', fetcher: 'sidra', expectedBytes: null });
  await waitFor(() => duringWarn.admitted, { what: 'a run to start while the gate only warns' });

  const part2 = await fetcherWrites(small.dir, 'anac', 'part2', 80); // ~60 MB free
  await waitFor(() => gate.status().state === 'paused', { what: 'the gate to pause' });
  const next = arrive(gate, { runId: 'r2', fetcher: 'tse', expectedBytes: null });
  await waitFor(() => next.reasons.find((r) => r.kind === 'disk' && r.state === 'paused'), { what: 'the run to wait at the paused gate' });
  assert.equal(next.admitted, false);

  fs.rmSync(part2); // ~140 MB free: above pause, below resume
  await waitFor(() => (gate.status().freeGb ?? 0) > 0.12, { what: 'the gate to see the freed space' });
  await gate.checkNow();
  assert.equal(gate.status().state, 'paused', 'between pause and resume the gate stays paused');
  assert.deepEqual(gate.status().next?.threshold, 'resume');
  assert.equal(next.admitted, false, 'the run still waits between pause and resume');
  assert.ok(fs.existsSync(flag));

  fs.rmSync(part1); // ~300 MB free: at or above resume
  await waitFor(() => next.admitted, { what: 'the run to be released at the resume level' });
  assert.equal(gate.status().state, 'ok');
  assert.equal(fs.existsSync(flag), false, 'the flag is gone once the gate is ok');

  const transitions = logger.records
    .filter((r) => (r.obj as { event?: string }).event === 'disk-gate')
    .map((r) => `${r.level}:${(r.obj as { to: string }).to}`);
  assert.deepEqual(transitions, ['info:ok', 'warn:warn', 'warn:paused', 'info:ok']);
});

test('admission counts what a running fetcher has written once, not twice', async (t) => {
  const small = smallFs(t);
  const disk: DiskConfig = { warnGb: 0.02, pauseGb: 0.01, resumeGb: 0.03, pollSeconds: 0.05, maxWaitSeconds: 60 };
  const gate = new DiskGate({ dataDir: small.dir, disk, logger: memoryLogger(), probe: small.probe });
  small.closeFirst(() => gate.close());
  await gate.start();

  const a: GateRequest = { runId: 'a', fetcher: 'datasus', expectedBytes: 200 * MiB };
  const first = arrive(gate, a);
  await waitFor(() => first.admitted, { what: 'the first run to be admitted' });
  fs.mkdirSync(path.join(small.dir, 'datasus'));
  gate.runStarted(a);
  await fetcherWrites(small.dir, 'datasus', 'big.zip', 150);

  // ~150 MB free, 50 MB of datasus still to come: an 80 MB run leaves ~20 MB, above the 10 MB
  // pause level. Counting datasus's whole 200 MB again would refuse it.
  const b = arrive(gate, { runId: 'b', fetcher: 'rfb-cnpj', expectedBytes: 80 * MiB });
  await waitFor(() => b.admitted, { what: 'the 80 MB run to be admitted' });
  // Now datasus's 50 MB and rfb-cnpj's 80 MB are both still to come: 15 MB more would cross pause.
  const c = arrive(gate, { runId: 'c', fetcher: 'pgfn', expectedBytes: 15 * MiB });
  await waitFor(() => c.reasons.find((r) => r.kind === 'admission'), { what: 'the 15 MB run to wait for admission' });
  assert.equal(c.admitted, false);
  gate.runEnded('a');
  await waitFor(() => c.admitted, { what: 'the 15 MB run to start once datasus ended' });
});

test('two heavy fetchers each declaring over half of the space above pause are not started together', async (t) => {
  const small = smallFs(t);
  const disk: DiskConfig = { warnGb: 0.02, pauseGb: 0.01, resumeGb: 0.03, pollSeconds: 0.05, maxWaitSeconds: 60 };
  const gate = new DiskGate({ dataDir: small.dir, disk, logger: memoryLogger(), probe: small.probe });
  small.closeFirst(() => gate.close());
  await gate.start();
  const share = 150 * MiB; // above pause there are ~290 MB; half is ~145 MB
  const first = arrive(gate, { runId: 'a', fetcher: 'comex', expectedBytes: share });
  const second = arrive(gate, { runId: 'b', fetcher: 'anac', expectedBytes: share });
  await waitFor(() => first.admitted, { what: 'the first heavy run to be admitted' });
  gate.runStarted({ runId: 'a', fetcher: 'comex', expectedBytes: share });
  await waitFor(() => second.reasons.find((r) => r.kind === 'admission'), { what: 'the second heavy run to wait' });
  await gate.checkNow();
  assert.equal(second.admitted, false);
  gate.runEnded('a');
  await waitFor(() => second.admitted, { what: 'the second heavy run to start after the first ended' });
});
