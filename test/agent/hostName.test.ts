import * as assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as path from 'node:path';
import { test } from 'node:test';

// A run's start event names the machine. The name is read again at most once a minute (a uname per
// run cost the main thread in a burst), and a rename shows after that. The rename happens for real,
// in a UTS namespace of its own (unshare, as root), so the machine's own name is never touched.
test("the start event's host name is reused within a minute and read again after it, so a rename shows", () => {
  const module = path.resolve(__dirname, '..', '..', 'agent', 'runs', 'hostName.js');
  const script = `
    const { execFileSync } = require('node:child_process');
    const { hostName } = require(${JSON.stringify(module)});
    execFileSync('hostname', ['before-rename']);
    const first = hostName(0);
    execFileSync('hostname', ['after-rename']);
    console.log(JSON.stringify([first, hostName(59_999), hostName(60_000)]));
  `;
  const out = execFileSync('unshare', ['--uts', process.execPath, '-e', script], { encoding: 'utf8' });
  assert.deepEqual(JSON.parse(out), ['before-rename', 'before-rename', 'after-rename']);
});
