// The stations run Node 20: every installed package accepts it, as `npm ci` checks (it warns with
// EBADENGINE otherwise), so an install on a station is quiet and a dependency that moved to Node 22
// fails here instead of in the field.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import * as semver from 'semver';

const REPO = path.resolve(__dirname, '..', '..', '..');

interface LockPackage {
  version?: string;
  engines?: Record<string, string> | string[];
}

test('every package in package-lock.json accepts the Node 20 the stations run, and so does the project', () => {
  const lock = JSON.parse(fs.readFileSync(path.join(REPO, 'package-lock.json'), 'utf8')) as { packages: Record<string, LockPackage> };
  const own = JSON.parse(fs.readFileSync(path.join(REPO, 'package.json'), 'utf8')) as { engines: { node: string } };
  assert.equal(semver.major(process.version), 20, "the tests run on the stations' Node 20");
  assert.ok(semver.satisfies(process.version, own.engines.node), `package.json's engines (${own.engines.node}) accept ${process.version}`);
  const refused: string[] = [];
  let checked = 0;
  for (const [where, pkg] of Object.entries(lock.packages)) {
    const range = Array.isArray(pkg.engines) ? undefined : pkg.engines?.node;
    if (where === '' || range === undefined) continue;
    checked += 1;
    if (!semver.satisfies(process.version, range))
      refused.push(`${where.replace(/^node_modules\//, '')}@${pkg.version ?? '?'} needs node ${range}`);
  }
  assert.ok(checked > 10, `packages with an engines field were read (${checked})`);
  assert.deepEqual(refused, [], `packages that refuse ${process.version}`);
});
