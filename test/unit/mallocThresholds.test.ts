import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { test } from 'node:test';
import { loadNativeMalloc } from '../../agent/memory/nativeMalloc';
import { REPO } from '../support/harness';
import { memoryLogger } from '../support/memoryLogger';

const MODULE = path.join(REPO, 'dist', 'quantilica-malloc.node');
const MIB = 1024 * 1024;

// In a process of its own, whose allocator is what is measured. A 30 MiB block is freed (glibc then
// raises its mmap threshold to 30 MiB and its trim threshold to 60 MiB, unless they are held), then an
// 8 MiB block is taken on the main thread: under the raised threshold it comes from the brk heap, which
// grows by it; above a held threshold it is a mapping of its own, handed back whole when freed.
const AFTER_A_LARGE_FREE = `
const fs = require('node:fs');
const loaded = { exports: {} };
process.dlopen(loaded, process.argv[1]);
const hold = Number(process.argv[2]);
const held = hold > 0 ? loaded.exports.holdThresholds(hold) : null;
const collect = require('node:vm').runInNewContext('gc');
const heapBytes = () => {
  const line = fs.readFileSync('/proc/self/maps', 'utf8').split('\\n').find((l) => l.endsWith('[heap]'));
  const [from, to] = line.split(' ')[0].split('-');
  return parseInt(to, 16) - parseInt(from, 16);
};
(async () => {
  let large = Buffer.alloc(30 * 1024 * 1024, 1);
  large = null;
  // Its memory is freed once the isolate's array-buffer bytes are back down.
  for (let i = 0; i < 200 && process.memoryUsage().arrayBuffers > 1024 * 1024; i++) {
    collect();
    await new Promise((resolve) => setImmediate(resolve));
  }
  const freedLarge = process.memoryUsage().arrayBuffers <= 1024 * 1024;
  const before = heapBytes();
  const block = Buffer.alloc(8 * 1024 * 1024, 1);
  console.log(JSON.stringify({ held, freedLarge, heapGrowth: heapBytes() - before, kept: block.length }));
})();
`;

function afterALargeFree(holdBytes: number): { held: boolean | null; freedLarge: boolean; heapGrowth: number } {
  const run = spawnSync(process.execPath, ['--expose-gc', '-e', AFTER_A_LARGE_FREE, MODULE, String(holdBytes)], { encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
  const figures = JSON.parse(run.stdout) as { held: boolean | null; freedLarge: boolean; heapGrowth: number };
  assert.equal(figures.freedLarge, true, 'the 30 MiB block was freed before the 8 MiB one was taken');
  return figures;
}

test("glibc's raised threshold puts an 8 MiB block in the heap; held at 1 MiB, the block is a mapping of its own", () => {
  const raised = afterALargeFree(0);
  assert.ok(raised.heapGrowth >= 8 * MIB, `raised: the brk heap grew by ${raised.heapGrowth} bytes`);
  const held = afterALargeFree(MIB);
  assert.equal(held.held, true, 'glibc took both thresholds');
  assert.ok(held.heapGrowth < MIB, `held: the brk heap grew by ${held.heapGrowth} bytes`);
});

test('the loader takes the thresholds, and refuses none', () => {
  const malloc = loadNativeMalloc(MODULE, memoryLogger());
  assert.ok(malloc, 'loaded');
  assert.equal(malloc.holdThresholds(0), false, 'no threshold of 0 bytes');
  assert.equal(malloc.holdThresholds(MIB), true);
});
