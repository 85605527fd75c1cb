// A pool's held slots: at a grant (a told prune) a slot whose holder's end the agent is told about is
// decided by that alone, without /proc; the guard's round (a full prune) looks every holder up in
// /proc, so an end never told is still found. Real processes and /proc.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { HeldSlots } from '../../agent/slots/heldSlots';
import type { OwnerRecord } from '../../agent/slots/ownerRecord';
import { readProcInfo } from '../../shared/node/procInfo';
import { memoryLogger } from '../support/memoryLogger';

const record = (pid: number, startTime: number): OwnerRecord => ({
  pid,
  startTime,
  fetcher: 'sidra',
  runId: `run-${pid}`,
  since: new Date().toISOString(),
  agentPid: process.pid,
});

/** A process that has ended and been reaped: its pid names nothing in /proc now. */
async function endedProcess(): Promise<{ pid: number; startTime: number }> {
  const child = spawn('/bin/true');
  const startTime = readProcInfo(child.pid!)?.startTime ?? 0;
  await new Promise((resolve) => child.once('exit', resolve));
  assert.equal(readProcInfo(child.pid!), null, 'the ended process is gone from /proc');
  return { pid: child.pid!, startTime };
}

/** A promise and its resolver, for an end told later. */
function toldLater(): { ended: Promise<boolean>; tell: (ended: boolean) => Promise<void> } {
  let resolve!: (ended: boolean) => void;
  const ended = new Promise<boolean>((r) => (resolve = r));
  return {
    ended,
    tell: async (value) => {
      resolve(value);
      await ended;
      await new Promise((r) => setImmediate(r));
    },
  };
}

const indices = (slots: Array<{ index: number }>) => slots.map((s) => s.index).sort();

test('a told prune keeps a slot whose holder has not been told ended, and drops it once told, without /proc', async () => {
  const held = new HeldSlots('heavy-io', memoryLogger());
  const gone = await endedProcess();
  const self = readProcInfo(process.pid)!;
  const untold = toldLater();
  const told = toldLater();
  // Slot 0: its holder ended, but the end is not told yet. Slot 1: a live holder (this process) told ended.
  held.track(0, 'slot_0.lock', record(gone.pid, gone.startTime), 1, 10, untold.ended);
  held.track(1, 'slot_1.lock', record(process.pid, self.startTime), 1, 11, told.ended);
  assert.deepEqual(indices(held.prune(true)), [], 'nothing told yet: both kept, /proc not asked');
  await told.tell(true);
  assert.deepEqual(indices(held.prune(true)), [1], 'told ended: dropped though /proc shows the pid alive');
  assert.equal(held.has(0), true);
  assert.deepEqual(indices(held.prune()), [0], "the guard's full round finds the untold end in /proc");
  assert.equal(held.size, 0);
});

test('an end that cannot be learned (false) or a slot tracked without one is decided by /proc', async () => {
  const held = new HeldSlots('cpu-analysis', memoryLogger());
  const gone = await endedProcess();
  const self = readProcInfo(process.pid)!;
  const unknown = toldLater();
  held.track(0, 'slot_0.lock', record(gone.pid, gone.startTime), 1, 10, unknown.ended);
  held.track(1, 'slot_1.lock', record(process.pid, self.startTime), 1, 11);
  const goneToo = await endedProcess();
  held.track(2, 'slot_2.lock', record(goneToo.pid, goneToo.startTime), 1, 12);
  await unknown.tell(false);
  assert.deepEqual(indices(held.prune(true)), [0, 2], 'the ended holders found in /proc, the live one kept');
  assert.equal(held.has(1), true);
});
