// `npm run bench [-- name…]`: builds, then runs the benchmarks one after another (all by default),
// each printing its figures, the targets and a JSON line. Names: slots, slotsPolicies, metrics, diskGate, schedule, flush, protocol, github, githubStatus, memory, pgSlots, pgSlotsThroughput, history.
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';

const root = path.resolve(import.meta.dirname, '..');
const all = [
  'slots',
  'slotsPolicies',
  'metrics',
  'diskGate',
  'schedule',
  'flush',
  'protocol',
  'github',
  'githubStatus',
  'memory',
  'pgSlots',
  'pgSlotsThroughput',
  'history',
];
const chosen = process.argv.slice(2).length > 0 ? process.argv.slice(2) : all;
const unknown = chosen.filter((n) => !all.includes(n));
if (unknown.length > 0) {
  console.error(`unknown benchmark ${unknown.join(', ')}; known: ${all.join(', ')}`);
  process.exit(64);
}
const step = (args) => {
  const r = spawnSync(args[0], args.slice(1), { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
};
step([process.execPath, 'esbuild.mjs']);
step([process.execPath, path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-b']);
for (const name of chosen) step([process.execPath, path.join(root, 'out', 'bench', `${name}.js`)]);
