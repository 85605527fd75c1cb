// `npm test`: every tier, in order. Unit and agent tests run on node's test runner from the compiled
// output of `tsc -b` (so the tests are type-checked); the extension suite runs in a real VS Code
// extension host (test/extension/runOffline.mjs). The last line adds both up.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

const root = path.resolve(import.meta.dirname, '..');
const only = process.argv.slice(2);

function testFiles(dir) {
  const abs = path.join(root, 'out', 'test', dir);
  if (!fs.existsSync(abs)) return [];
  return fs
    .readdirSync(abs, { recursive: true })
    .filter((f) => f.endsWith('.test.js'))
    .map((f) => path.join(abs, f))
    .filter((f) => only.length === 0 || only.some((o) => f.includes(o)))
    .sort();
}

/** Runs a command with its output shown as it comes, and returns its exit status and output. */
function run(command, args) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] });
    let output = '';
    child.stdout.on('data', (d) => {
      output += d.toString();
      process.stdout.write(d);
    });
    child.on('close', (code, signal) => resolve({ status: code ?? (signal ? 1 : 0), output }));
  });
}

const files = [...testFiles('unit'), ...testFiles('agent')];
if (files.length === 0) {
  console.error('no test files found under out/test: did `tsc -b` run?');
  process.exit(1);
}
const tap = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'quantilica-test-')), 'node.tap');
// One file at a time, whatever the machine's count of CPUs: files share /proc, ports and the cgroup tree.
const node = await run(process.execPath, [
  '--test',
  '--test-concurrency=1',
  '--test-reporter=spec',
  '--test-reporter-destination=stdout',
  '--test-reporter=tap',
  `--test-reporter-destination=${tap}`,
  ...files,
]);
const tapText = fs.readFileSync(tap, 'utf8');
let passed = Number(/^# pass (\d+)$/m.exec(tapText)?.[1] ?? 0);
let failed = Number(/^# fail (\d+)$/m.exec(tapText)?.[1] ?? 0) + Number(/^# cancelled (\d+)$/m.exec(tapText)?.[1] ?? 0);
let status = node.status;
// The spec reporter's failures scroll away in a long run: name them again at the end, where a CI log's tail shows them.
// With each, where it failed and the first lines of its error: a CI log keeps only its tail.
const notOk = [...tapText.matchAll(/^(\s*)not ok \d+ - (.*)$/gm)].map((m) => {
  const indent = m[1];
  const rest = tapText.slice(m.index + m[0].length).split('\n');
  const block = [];
  for (const line of rest.slice(1)) {
    if (!line.startsWith(`${indent}  `) || /^\s*\.\.\.$/.test(line)) break;
    block.push(line);
  }
  const location = block.find((l) => /^\s*location:/.test(l))?.trim();
  const errorAt = block.findIndex((l) => /^\s*error:/.test(l));
  const error = [];
  if (errorAt >= 0) {
    error.push(block[errorAt].trim());
    for (const l of block.slice(errorAt + 1)) {
      if (!l.startsWith(`${indent}    `) || error.length > 6) break;
      error.push(l.trim());
    }
  }
  return [`${indent}${m[2]}`, ...(location ? [`${indent}  ${location}`] : []), ...error.map((l) => `${indent}  ${l}`)].join('\n');
});

const extensionRunner = path.join(root, 'test', 'extension', 'runOffline.mjs');
if (only.length === 0) {
  const ext = await run(process.execPath, [extensionRunner]);
  // mocha's own summary lines, one per suite run in the extension host.
  for (const m of ext.output.matchAll(/(\d+) passing/g)) passed += Number(m[1]);
  for (const m of ext.output.matchAll(/(\d+) failing/g)) failed += Number(m[1]);
  if (ext.status !== 0) {
    status = ext.status;
    if (!/\d+ failing/.test(ext.output)) failed += 1; // the host itself failed: count it, never hide it
  }
}
if (notOk.length > 0) console.log(`\nfailed in the node tier (the file, then the test):\n${notOk.join('\n')}`);
console.log(`\ntotal: ${passed} passed, ${failed} failed`);
fs.rmSync(path.dirname(tap), { recursive: true, force: true });
process.exit(status !== 0 ? status : failed > 0 ? 1 : 0);
