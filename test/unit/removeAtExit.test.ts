// A suite or a benchmark leaves nothing in the machine's temp folder: the stations a test process makes
// (makeTestEnv) and the folders given to removeAtExit are gone once that process exits, however it
// ends its life through `exit` (its end, an early process.exit).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';

const SUPPORT = path.resolve(__dirname, '..', 'support');

/** Runs `body` in a node process of its own; returns the folders it printed (one per line), checked to exist while it ran. */
function foldersMadeBy(body: string): string[] {
  const script = `
    const fs = require('node:fs');
    const path = require('node:path');
    const os = require('node:os');
    const { removeAtExit } = require(${JSON.stringify(path.join(SUPPORT, 'removeAtExit.js'))});
    const { makeTestEnv } = require(${JSON.stringify(path.join(SUPPORT, 'harness.js'))});
    const made = [];
    const tell = (dir) => { if (!fs.statSync(dir).isDirectory()) throw new Error(dir + ' was not made'); made.push(dir); };
    process.on('exit', () => process.stdout.write(made.join('\\n') + '\\n'));
    ${body}
  `;
  const child = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8' });
  assert.equal(child.stderr, '', 'the process wrote nothing on stderr (no folder failed to go)');
  assert.ok(child.status === 0 || child.status === 3, `the process ended as the script says (status ${child.status})`);
  return child.stdout.split('\n').filter((line) => line !== '');
}

test('a test station and a folder given to removeAtExit, with what is in them, are gone once the process that made them exits', () => {
  const made = foldersMadeBy(`
    const env = makeTestEnv([{ name: 'noop', pool: 'heavy-io', argv: ['/bin/true'] }]);
    fs.mkdirSync(path.join(env.dataDir, 'deep', 'er'), { recursive: true });
    fs.writeFileSync(path.join(env.dataDir, 'deep', 'er', 'file'), 'x');
    tell(env.root);
    const own = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-own-'));
    removeAtExit(own);
    fs.writeFileSync(path.join(own, 'file'), 'x');
    tell(own);
  `);
  assert.equal(made.length, 2, 'both folders were made and told');
  for (const dir of made) assert.equal(fs.existsSync(dir), false, `${dir} is gone after the process exited`);
});

test('the folders are removed also when the process ends early with process.exit', () => {
  const made = foldersMadeBy(`
    const own = fs.mkdtempSync(path.join(os.tmpdir(), 'qt-own-'));
    removeAtExit(own);
    tell(own);
    setTimeout(() => {}, 60_000);
    process.exit(3);
  `);
  assert.equal(made.length, 1, 'the folder was made and told');
  assert.equal(fs.existsSync(made[0]), false, `${made[0]} is gone after process.exit`);
});
