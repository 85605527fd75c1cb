import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { SpawnerExit } from '../../agent/helperExitCodes';

// The native spawner's exit codes are #defines in C and SpawnerExit in TypeScript: the agent reads
// them, so a code changed on one side only would send a refusal down the wrong path. Both sides
// name them; no bare number stands for one.

const REPO = path.resolve(__dirname, '..', '..', '..');
const read = (file: string) => fs.readFileSync(path.join(REPO, file), 'utf8');

test("the native spawner's exit codes have the same names and values in the C file and in agent/helperExitCodes.ts", () => {
  const c = read('agent/native/quantilica-spawner.c');
  const defined = Object.fromEntries([...c.matchAll(/^#define SPAWNER_EXIT_([A-Z_]+) (\d+)\b/gm)].map((m) => [m[1], Number(m[2])]));
  const named = Object.fromEntries(Object.entries(SpawnerExit).map(([k, v]) => [k.replace(/[A-Z]/g, (ch) => `_${ch}`).toUpperCase(), v]));
  assert.ok(Object.keys(named).length >= 4);
  assert.deepEqual(defined, named);
});

test("the spawner, the slot keeper and the agent's side of the spawner give exit codes by name only", () => {
  const c = read('agent/native/quantilica-spawner.c');
  const main = c.slice(c.indexOf('int main(void)'));
  assert.deepEqual(
    [...main.matchAll(/return (\d+);/g)].map((m) => m[1]).filter((code) => code !== '0'),
    [],
    'main returns a SPAWNER_EXIT_ name',
  );
  assert.doesNotMatch(c, /_exit\(\d/);
  assert.doesNotMatch(c, /child_fail\([^,]+, \d/);
  assert.doesNotMatch(read('agent/slots/pgSlotKeeper.ts'), /process\.exit\(\d/);
  assert.doesNotMatch(read('agent/runs/nativeSpawner.ts'), /code === \d/);
});
