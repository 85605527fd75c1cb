// `npm run package`: the .vsix. The extension ships the bundled agent (dist/agent.js), whose native
// modules (better-sqlite3, fs-ext) esbuild cannot bundle, so they travel as files in node_modules.
// vsce's own dependency walk (`npm list`) would pull in the whole production tree, and with
// `--no-dependencies` it skips node_modules/ altogether; so a staging folder holds package.json, the
// README, dist/ (with the native packages' run-time files in dist/node_modules, where Node finds
// them from dist/agent.js) and media/, and the allow-list .vscodeignore decides what enters.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';

const root = path.resolve(import.meta.dirname, '..');
const stage = path.join(root, '.cache', 'vsix-stage');
/** Loaded by dist/agent.js at run time, and what they require in turn: only the files used then. */
const RUNTIME_FILES = {
  'better-sqlite3': ['package.json', 'LICENSE', 'lib', 'build/Release/better_sqlite3.node'],
  'fs-ext': ['package.json', 'LICENSE.txt', 'fs-ext.js', 'build/Release/fs_ext.node'],
  bindings: ['package.json', 'LICENSE.md', 'bindings.js'],
  'file-uri-to-path': ['package.json', 'LICENSE', 'index.js'],
};

function run(command, args, cwd) {
  const result = spawnSync(command, args, { cwd, stdio: 'inherit' });
  if (result.status !== 0) throw new Error(`${path.basename(command)} ${args.join(' ')} exited with ${result.status}`);
}

run(process.execPath, ['esbuild.mjs'], root);
for (const file of ['dist/extension.js', 'dist/agent.js', 'dist/runWrapper.sh', 'media/icon.png']) {
  if (!fs.existsSync(path.join(root, file))) throw new Error(`${file} is missing: the .vsix would not work`);
}

fs.rmSync(stage, { recursive: true, force: true });
fs.mkdirSync(stage, { recursive: true });
const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
// What only the repository needs stays out of the extension's manifest.
delete pkg.devDependencies;
delete pkg.scripts;
delete pkg.allowScripts;
fs.writeFileSync(path.join(stage, 'package.json'), `${JSON.stringify(pkg, null, 2)}\n`);
// The Details page shows the README of the package root: the user's README (extension/README.md), not
// the repository's developer README, whose pictures live outside the package.
fs.copyFileSync(path.join(root, 'extension', 'README.md'), path.join(stage, 'README.md'));
for (const entry of ['LICENSE', 'dist', 'media', '.vscodeignore']) {
  const from = path.join(root, entry);
  // Source maps help nobody who installs the extension.
  if (fs.existsSync(from)) fs.cpSync(from, path.join(stage, entry), { recursive: true, filter: (f) => !f.endsWith('.map') });
}
for (const [name, files] of Object.entries(RUNTIME_FILES)) {
  for (const file of files) {
    const from = path.join(root, 'node_modules', name, file);
    if (fs.existsSync(from)) fs.cpSync(from, path.join(stage, 'dist', 'node_modules', name, file), { recursive: true, dereference: true });
  }
}

const out = path.join(root, `${pkg.name}-${pkg.version}.vsix`);
run(
  process.execPath,
  [
    path.join(root, 'node_modules', '@vscode', 'vsce', 'vsce'),
    'package',
    '--no-dependencies',
    '--no-update-package-json',
    '--skip-license',
    '--allow-missing-repository',
    // The README's links are relative to the repository, which has no public URL yet.
    '--no-rewrite-relative-links',
    '--out',
    out,
  ],
  stage,
);

// The archive must hold what the agent loads; vsce would not notice a missing native module.
const listing = spawnSync('unzip', ['-Z1', out], { encoding: 'utf8' });
if (listing.status === 0) {
  for (const needed of [
    'extension/dist/agent.js',
    'extension/dist/extension.js',
    'extension/dist/node_modules/better-sqlite3/build/Release/better_sqlite3.node',
    'extension/dist/node_modules/fs-ext/build/Release/fs_ext.node',
    'extension/dist/node_modules/bindings/bindings.js',
  ]) {
    if (!listing.stdout.split('\n').includes(needed)) throw new Error(`${needed} is not in ${out}`);
  }
}
process.stdout.write(`${out}\n`);
