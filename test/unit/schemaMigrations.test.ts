import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { MIGRATIONS } from '../../agent/db/migrations';
import type { Migration } from '../../agent/db/migration';

// Each part keeps its migrations in its own folder, but they are one schema, recorded by version in
// core.schema_migration: a migration file left out of the list, or listed under another number than
// its name, would leave databases that older agents think are current.

// The sources name the files (a build leaves the output of a removed one behind); the compiled ones load.
const SOURCES = path.resolve(__dirname, '..', '..', '..', 'agent');
const COMPILED = path.resolve(__dirname, '..', '..', 'agent');
const PARTS = ['telemetry/migrations', 'slots/migrations'];

test("every part's migration is in the one list, under the number of its file, and the list counts from 1", async () => {
  const files = PARTS.flatMap((dir) =>
    fs
      .readdirSync(path.join(SOURCES, dir))
      .filter((f) => /^\d{3}_\w+\.ts$/.test(f))
      .map((f) => path.join(dir, f)),
  );
  assert.ok(files.length >= 2, `only ${files.length} migration files found under ${SOURCES}`);
  const fromFiles: Migration[] = [];
  for (const file of files) {
    const module = (await import(path.join(COMPILED, file.replace(/\.ts$/, '.js')))) as Record<string, Migration>;
    const exported = Object.entries(module)
      .filter(([name]) => /^migration\d{3}$/.test(name))
      .map(([, m]) => m);
    assert.equal(exported.length, 1, `${file} exports one migration`);
    const [migration] = exported;
    assert.equal(migration.version, Number(path.basename(file).slice(0, 3)), `${file}: version and file name agree`);
    assert.equal(migration.name, path.basename(file, '.ts').slice(4), `${file}: name and file name agree`);
    fromFiles.push(migration);
  }
  assert.deepEqual(
    [...MIGRATIONS].sort((a, b) => a.version - b.version),
    fromFiles.sort((a, b) => a.version - b.version),
  );
  assert.deepEqual(
    MIGRATIONS.map((m) => m.version),
    MIGRATIONS.map((_, i) => i + 1),
  );
  // Both parts own some.
  for (const dir of PARTS)
    assert.ok(
      files.some((f) => f.includes(dir)),
      `no migration under ${dir}`,
    );
});
