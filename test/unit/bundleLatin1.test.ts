import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { REPO } from '../support/harness';

// V8 keeps a script's source while its functions live, one byte per character only when every
// character is Latin-1: one em dash in a comment doubles what the agent's bundle costs it (esbuild.mjs).

for (const bundle of ['agent.js', 'githubLegWorker.js', 'runSpawnWorker.js', 'pgSlotKeeper.js']) {
  test(`dist/${bundle} has no character beyond Latin-1, so V8 holds its source one byte per character`, () => {
    const text = fs.readFileSync(path.join(REPO, 'dist', bundle), 'utf8');
    const beyond = text.split('\n').flatMap((line, i) => (/[^\t-\u00ff]/.test(line) ? [`${i + 1}: ${line.trim().slice(0, 80)}`] : []));
    assert.deepEqual(beyond, [], `lines with characters beyond Latin-1 in dist/${bundle}`);
  });
}
