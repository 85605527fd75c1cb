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
// 8 MiB block of a fill byte is taken on the main thread: under the raised threshold it lies in the brk
// heap; above a held threshold it is a mapping of its own, handed back whole when freed. Where it lies is
// read from the process's own memory (the heap may already have had the room, so its growth proves
// nothing): pages wholly of the fill byte inside [heap], and inside the mappings that came with the block.
const AFTER_A_LARGE_FREE = `
const fs = require('node:fs');
const loaded = { exports: {} };
process.dlopen(loaded, process.argv[1]);
const hold = Number(process.argv[2]);
const held = hold > 0 ? loaded.exports.holdThresholds(hold) : null;
const collect = require('node:vm').runInNewContext('gc');
const FILL = 0xa7;
const PAGE = 4096;
const mappings = () =>
  fs.readFileSync('/proc/self/maps', 'utf8').split('\\n').filter(Boolean).map((line) => {
    const [range, perms] = line.split(' ');
    const [from, to] = range.split('-').map((hex) => parseInt(hex, 16));
    return { range, from, to, readable: perms.startsWith('r'), heap: line.endsWith('[heap]') };
  }).filter((m) => m.readable);
// Pages wholly of the fill byte in [from, to). A page is compared with the block's own first page,
// so no other buffer of the fill byte is made.
const filledPages = (mem, from, to, page) => {
  const chunk = Buffer.allocUnsafeSlow(1024 * 1024);
  let count = 0;
  for (let at = from; at < to; at += chunk.length) {
    const length = fs.readSync(mem, chunk, 0, Math.min(chunk.length, to - at), at);
    for (let offset = 0; offset + PAGE <= length; offset += PAGE) {
      if (chunk.compare(page, 0, PAGE, offset, offset + PAGE) === 0) count++;
    }
  }
  return count;
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
  const before = new Set(mappings().map((m) => m.range));
  const block = Buffer.alloc(8 * 1024 * 1024, FILL);
  const after = mappings();
  const mem = fs.openSync('/proc/self/mem', 'r');
  const page = block.subarray(0, PAGE);
  const count = (list) => list.reduce((sum, m) => sum + filledPages(mem, m.from, m.to, page), 0);
  const inHeap = count(after.filter((m) => m.heap));
  const inNewMappings = count(after.filter((m) => !m.heap && !before.has(m.range)));
  fs.closeSync(mem);
  console.log(JSON.stringify({ held, freedLarge, inHeap, inNewMappings, kept: block.length }));
})();
`;

// The block is 2,048 pages; wherever it lies, at least 2,047 of them are whole pages of the fill byte.
const BLOCK_PAGES = 2047;

function afterALargeFree(holdBytes: number): { held: boolean | null; inHeap: number; inNewMappings: number } {
  const run = spawnSync(process.execPath, ['--expose-gc', '-e', AFTER_A_LARGE_FREE, MODULE, String(holdBytes)], { encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
  const figures = JSON.parse(run.stdout) as { held: boolean | null; freedLarge: boolean; inHeap: number; inNewMappings: number };
  assert.equal(figures.freedLarge, true, 'the 30 MiB block was freed before the 8 MiB one was taken');
  return figures;
}

test("glibc's raised threshold puts an 8 MiB block in the heap; held at 1 MiB, the block is a mapping of its own", () => {
  const raised = afterALargeFree(0);
  assert.ok(raised.inHeap >= BLOCK_PAGES, `raised: ${raised.inHeap} of the block's pages lie in the brk heap`);
  assert.ok(raised.inNewMappings < BLOCK_PAGES, `raised: ${raised.inNewMappings} of the block's pages lie in a new mapping`);
  const held = afterALargeFree(MIB);
  assert.equal(held.held, true, 'glibc took both thresholds');
  assert.ok(held.inNewMappings >= BLOCK_PAGES, `held: ${held.inNewMappings} of the block's pages lie in a new mapping`);
  assert.ok(held.inHeap < BLOCK_PAGES, `held: ${held.inHeap} of the block's pages lie in the brk heap`);
});

test('the loader takes the thresholds, and refuses none', () => {
  const malloc = loadNativeMalloc(MODULE, memoryLogger());
  assert.ok(malloc, 'loaded');
  assert.equal(malloc.holdThresholds(0), false, 'no threshold of 0 bytes');
  assert.equal(malloc.holdThresholds(MIB), true);
});
