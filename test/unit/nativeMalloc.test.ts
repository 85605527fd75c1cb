import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { loadNativeMalloc } from '../../agent/memory/nativeMalloc';
import { REPO } from '../support/harness';
import { memoryLogger } from '../support/memoryLogger';

const MODULE = path.join(REPO, 'dist', 'quantilica-malloc.node');

// In a process of its own: what is measured is that process's allocator. 60,000 buffers of 2 kB
// (glibc's heap, under its mmap threshold) with one in fifty kept, so the heap's top stays in use
// and free() alone gives nothing back; after the collection their memory is free but still resident.
const FRAGMENTED_HEAP = `
const loaded = { exports: {} };
process.dlopen(loaded, process.argv[1]);
const rssMb = () => Number(/VmRSS:\\s+(\\d+)/.exec(require('fs').readFileSync('/proc/self/status', 'utf8'))[1]) / 1024;
const kept = [];
let all = [];
for (let i = 0; i < 60000; i++) {
  const b = Buffer.alloc(2000);
  all.push(b);
  if (i % 50 === 0) kept.push(b);
}
all = null;
gc();
gc();
const collected = rssMb();
const trimmed = loaded.exports.trim();
console.log(JSON.stringify({ collected, trimmed, after: rssMb(), kept: kept.length }));
`;

test("the allocator's trim gives a fragmented heap's free pages back to the kernel", () => {
  assert.ok(fs.existsSync(MODULE), `${MODULE} is built by npm run build (cc and node-api-headers)`);
  const run = spawnSync(process.execPath, ['--expose-gc', '-e', FRAGMENTED_HEAP, MODULE], { encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
  const { collected, trimmed, after } = JSON.parse(run.stdout) as { collected: number; trimmed: boolean; after: number };
  assert.equal(trimmed, true, 'malloc_trim says it released memory');
  assert.ok(collected - after >= 50, `RSS ${collected.toFixed(1)} MB after the collection, ${after.toFixed(1)} MB after the trim`);
});

test('the module loads through its loader, takes an arena limit, and a missing module is null', () => {
  const logger = memoryLogger();
  const malloc = loadNativeMalloc(MODULE, logger);
  assert.ok(malloc, 'loaded');
  assert.equal(malloc.limitArenas(0), false, 'no limit of 0 arenas');
  assert.equal(malloc.limitArenas(8), true, 'a limit glibc takes');
  assert.equal(typeof malloc.trim(), 'boolean');
  assert.equal(loadNativeMalloc(path.join(REPO, 'dist', 'no-such.node'), logger), null);
  assert.ok(
    logger.records.some((r) => /not available/.test(r.msg ?? '')),
    'the missing module is logged',
  );
});
