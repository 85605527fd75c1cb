import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { loadNativeHeap } from '../../agent/memory/nativeHeap';
import { REPO } from '../support/harness';
import { memoryLogger } from '../support/memoryLogger';

const MODULE = path.join(REPO, 'dist', 'quantilica-heap.node');
const MIB = 1024 * 1024;

// In a process of its own, with V8's natives: a function optimized on objects of one shape, then the
// collection after a burst once every such object is garbage. An atomic collection (gc()) lets the
// shape's map die with its objects and throws the function's optimized code away ("weak objects");
// the collection V8 runs itself keeps the map, and the code. `argv[1]` is the heap module, or none.
const AFTER_THE_BURST = `
const { BurstHeap } = require(${JSON.stringify(path.join(REPO, 'out', 'agent', 'memory', 'burstHeap.js'))});
const { loadNativeHeap } = require(${JSON.stringify(path.join(REPO, 'out', 'agent', 'memory', 'nativeHeap.js'))});
const { memoryLogger } = require(${JSON.stringify(path.join(REPO, 'out', 'test', 'support', 'memoryLogger.js'))});
const { waitFor } = require(${JSON.stringify(path.join(REPO, 'out', 'test', 'support', 'waitFor.js'))});
const logger = memoryLogger();
function Run(i) { this.id = i; this.fetcher = 'sidra-' + (i % 3); this.attempt = 1 + (i % 2); }
function weight(run) { return run.id + run.attempt; }
let runs = Array.from({ length: 2000 }, (_, i) => new Run(i));
%PrepareFunctionForOptimization(weight);
for (const run of runs) weight(run);
%OptimizeFunctionOnNextCall(weight);
weight(runs[0]);
// 16: the kOptimized bit of V8's OptimizationStatus.
const optimized = () => (%GetOptimizationStatus(weight) & 16) !== 0;
const before = optimized();
const last = new WeakRef(runs[runs.length - 1]);
runs = null;
const native = process.argv[1] === 'none' ? null : loadNativeHeap(process.argv[1], logger);
let released = 0;
const heap = BurstHeap.install(logger, () => (released += 1), native && (() => native.reportExternalMemory(${128 * MIB})));
for (let i = 0; i < 200; i++) heap.runEnded();
heap.idle();
waitFor(() => logger.records.find((r) => r.msg === 'collected the heap after a burst'), { what: 'the collection', timeoutMs: 15000 }).then((done) =>
  // A WeakRef made in this job is cleared by a collection in a later one: the next turn tells.
  setImmediate(() => console.log(JSON.stringify({ before, after: optimized(), collected: last.deref() === undefined, released, by: done.obj.by }))),
);
`;

interface AfterTheBurst {
  before: boolean;
  after: boolean;
  collected: boolean;
  released: number;
  by: string;
}

function afterTheBurst(module: string): AfterTheBurst {
  const run = spawnSync(process.execPath, ['--allow-natives-syntax', '-e', AFTER_THE_BURST, module], { encoding: 'utf8', timeout: 20000 });
  assert.equal(run.status, 0, run.stderr);
  return JSON.parse(run.stdout) as AfterTheBurst;
}

test("the collection after a burst is V8's own: the burst's garbage goes, its optimized code stays", () => {
  assert.ok(fs.existsSync(MODULE), `${MODULE} is built by npm run build (cc and node-api-headers)`);
  const kept = afterTheBurst(MODULE);
  assert.equal(kept.before, true, 'the function was optimized before the collection');
  assert.equal(kept.by, 'v8', 'collected by V8 itself, not by gc()');
  assert.equal(kept.collected, true, "the burst's last object was collected");
  assert.equal(kept.released, 1, "the C side's memory is released once, after both collections");
  assert.equal(kept.after, true, 'the optimized code outlived the collection');
});

test('without the heap module the collection is still made, by gc()', () => {
  const fallback = afterTheBurst('none');
  assert.equal(fallback.by, 'gc');
  assert.equal(fallback.collected, true, "the burst's last object was collected");
  assert.equal(fallback.released, 1);
  assert.equal(fallback.after, false, "gc()'s collection threw the optimized code away: what the heap module is there for");
});

test('the loader takes the heap module, which refuses an amount of 0, below 0 or not a number; a missing module is null', () => {
  const logger = memoryLogger();
  const heap = loadNativeHeap(MODULE, logger);
  assert.ok(heap, 'loaded');
  assert.equal(heap.reportExternalMemory(0), false, 'no report of 0 bytes');
  assert.equal(heap.reportExternalMemory(-MIB), false, 'no report of a negative amount');
  assert.equal((heap.reportExternalMemory as (bytes: unknown) => boolean)('128'), false, 'no report of what is not a number');
  assert.equal(loadNativeHeap(path.join(REPO, 'dist', 'no-such.node'), logger), null);
  assert.ok(
    logger.records.some((r) => /not available/.test(r.msg ?? '')),
    'the missing module is logged',
  );
});
