// `npm test`: every tier, in order. Unit and agent tests run on node's test runner from the compiled
// output of `tsc -b` (so the tests are type-checked); the extension suite runs in a real VS Code
// extension host (test/extension/runOffline.mjs) when that tier exists.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';

const root = path.resolve(import.meta.dirname, '..');
const only = process.argv.slice(2);

function testFiles(dir) {
  const abs = path.join(root, 'out', 'test', dir);
  if (!fs.existsSync(abs)) return [];
  return fs.readdirSync(abs, { recursive: true })
    .filter((f) => f.endsWith('.test.js'))
    .map((f) => path.join(abs, f))
    .filter((f) => only.length === 0 || only.some((o) => f.includes(o)))
    .sort();
}

const files = [...testFiles('unit'), ...testFiles('agent')];
if (files.length === 0) {
  console.error('no test files found under out/test: did `tsc -b` run?');
  process.exit(1);
}
const result = spawnSync(process.execPath, ['--test', '--test-reporter=spec', ...files], { stdio: 'inherit', cwd: root });
let status = result.status ?? 1;

const extensionRunner = path.join(root, 'test', 'extension', 'runOffline.mjs');
if (only.length === 0 && fs.existsSync(extensionRunner)) {
  const ext = spawnSync(process.execPath, [extensionRunner], { stdio: 'inherit', cwd: root });
  if ((ext.status ?? 1) !== 0) status = ext.status ?? 1;
}
process.exit(status);
