import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import ts from 'typescript';

// Dependencies point one way (extension -> shared <- agent; inside the agent, the low layers never
// reach up and the parts named below never reach into each other), and no file depends on itself
// through others. This reads every import of the sources, as written, with the TypeScript
// pre-processor (static, dynamic and `require` alike), checks the rules and looks for cycles.
// docs/architecture.md (Layers) draws the same map.

const REPO = path.resolve(__dirname, '..', '..', '..');
const ROOTS = ['agent', 'extension', 'shared'];

interface Edge {
  from: string;
  to: string;
  specifier: string;
}

function sources(dir: string): string[] {
  return fs
    .readdirSync(path.join(REPO, dir), { recursive: true, encoding: 'utf8' })
    .filter((f) => /\.(ts|mts|mjs)$/.test(f) && !f.endsWith('.d.ts') && !f.split(path.sep).includes('node_modules'))
    .map((f) => path.join(dir, f));
}

/** Every import of a file; `to` is repository-relative for a relative specifier, the bare name otherwise. */
function importsOf(file: string): Edge[] {
  const text = fs.readFileSync(path.join(REPO, file), 'utf8');
  return ts.preProcessFile(text, true, true).importedFiles.map(({ fileName }) => ({
    from: file,
    specifier: fileName,
    to: fileName.startsWith('.') ? path.relative(REPO, path.resolve(REPO, path.dirname(file), fileName)) : fileName,
  }));
}

const inside = (file: string, dir: string) => file === dir || file.startsWith(`${dir}/`);
const relative = (e: Edge) => e.specifier.startsWith('.');
/** Any folder of the agent other than the given ones (the agent's root files, errors.ts and the like, excepted). */
const otherAgentFolder = (to: string, ...allowed: string[]) =>
  inside(to, 'agent') && to.split('/').length > 2 && !allowed.some((dir) => inside(to, dir));

/** The rules, one function per rule; each returns the edges that break it. */
const RULES: Record<string, (e: Edge) => boolean> = {
  'agent/telemetry and agent/slots do not import agent/server or agent/runs': (e) =>
    (inside(e.from, 'agent/telemetry') || inside(e.from, 'agent/slots')) && (inside(e.to, 'agent/server') || inside(e.to, 'agent/runs')),
  'agent/telemetry imports nothing of agent/slots': (e) => inside(e.from, 'agent/telemetry') && inside(e.to, 'agent/slots'),
  'agent/slots imports nothing of agent/telemetry': (e) => inside(e.from, 'agent/slots') && inside(e.to, 'agent/telemetry'),
  // The one PostgreSQL schema: agent/db runs the migrations and lists them in order; each part owns its
  // own, which are plain data that know only their type.
  "agent/db imports of the agent only agent/log and the parts' migrations": (e) =>
    inside(e.from, 'agent/db') && otherAgentFolder(e.to, 'agent/db', 'agent/log', 'agent/telemetry/migrations', 'agent/slots/migrations'),
  "a part's migrations import only agent/db/migration": (e) =>
    (inside(e.from, 'agent/telemetry/migrations') || inside(e.from, 'agent/slots/migrations')) &&
    relative(e) &&
    e.to !== 'agent/db/migration',
  'agent/memory imports nothing of agent/runs': (e) => inside(e.from, 'agent/memory') && inside(e.to, 'agent/runs'),
  // Process groups and kernel flocks: the leaves that runs, memory, slots, station and telemetry share.
  "agent/process and agent/flock import nothing of the agent's other folders": (e) =>
    (inside(e.from, 'agent/process') || inside(e.from, 'agent/flock')) && otherAgentFolder(e.to, 'agent/process', 'agent/flock'),
  'agent/station imports nothing of agent/runs': (e) => inside(e.from, 'agent/station') && inside(e.to, 'agent/runs'),
  'agent/github imports nothing of agent/cli': (e) => inside(e.from, 'agent/github') && inside(e.to, 'agent/cli'),
  // The CLI is the top: its commands build on everything else, nothing builds on them.
  'only agent/main.ts imports agent/cli': (e) =>
    inside(e.from, 'agent') && !inside(e.from, 'agent/cli') && e.from !== 'agent/main.ts' && inside(e.to, 'agent/cli'),
  'extension/ imports of the repository only shared/': (e) =>
    inside(e.from, 'extension') && relative(e) && !inside(e.to, 'extension') && !inside(e.to, 'shared'),
  'shared/ imports nothing of agent/, extension/ or vscode': (e) =>
    inside(e.from, 'shared') &&
    (inside(e.to, 'agent') || inside(e.to, 'extension') || e.to === 'vscode' || e.to.startsWith('vscode-languageclient')),
  // shared/node/ holds the Node-side client helpers (connection file, socket); the rest of shared/ is
  // the pure protocol, usable anywhere.
  'shared/ outside shared/node imports no Node-only module': (e) =>
    inside(e.from, 'shared') &&
    !inside(e.from, 'shared/node') &&
    (e.to.startsWith('node:') || e.to === 'ws' || inside(e.to, 'shared/node')),
};

function violations(edges: Edge[]): string[] {
  return Object.entries(RULES).flatMap(([rule, breaks]) => edges.filter(breaks).map((e) => `${rule}: ${e.from} imports '${e.specifier}'`));
}

/** The source file a relative import names (`./x`, `./x.js`, `./dir`), or null when none exists. */
function resolveSource(to: string, files: Set<string>): string | null {
  const stem = to.replace(/\.(js|mjs)$/, '');
  return [to, `${to}.ts`, `${to}.mts`, `${to}.mjs`, `${stem}.ts`, `${stem}.mts`, `${to}/index.ts`].find((f) => files.has(f)) ?? null;
}

/**
 * Every import cycle, one per strongly connected component of the file graph (Tarjan's algorithm),
 * each drawn as its shortest loop through the component's first file: `a.ts -> b.ts -> a.ts`.
 */
function cycles(graph: Map<string, string[]>): string[] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const components: string[][] = [];
  const visit = (v: string) => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || (graph.get(v) ?? []).includes(v)) components.push(component.sort());
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return components.map((component) => loopThrough(component[0], new Set(component), graph).join(' -> ')).sort();
}

/** The shortest path from `start` back to itself inside one component (breadth first). */
function loopThrough(start: string, component: Set<string>, graph: Map<string, string[]>): string[] {
  const cameFrom = new Map<string, string>();
  const queue = [start];
  for (let i = 0; i < queue.length; i++) {
    for (const w of graph.get(queue[i]) ?? []) {
      if (!component.has(w)) continue;
      if (w === start) {
        const between: string[] = [];
        for (let at = queue[i]; at !== start; at = cameFrom.get(at)!) between.unshift(at);
        return [start, ...between, start];
      }
      if (!cameFrom.has(w)) {
        cameFrom.set(w, queue[i]);
        queue.push(w);
      }
    }
  }
  return [start];
}

function readGraph() {
  const files = ROOTS.flatMap(sources);
  // A reader that finds nothing would pass vacuously.
  assert.ok(files.length > 100, `only ${files.length} source files found under ${REPO}`);
  return { files, edges: files.flatMap(importsOf) };
}

test('the import graph of agent/, extension/ and shared/ points one way', () => {
  const { edges } = readGraph();
  assert.ok(
    edges.some((e) => e.from === 'agent/cli/agentCommand.ts' && inside(e.to, 'agent')),
    'relative imports were not resolved',
  );
  assert.deepEqual(violations(edges), []);
});

// Type-only imports count: they vanish from the bundle, but a reader (and the compiler) still needs
// the other file to understand this one, so a loop of them ties the files together just the same; and
// one that must point back can always point at a small module of its own types instead.
test('no import cycle under agent/, extension/ or shared/', () => {
  const { files, edges } = readGraph();
  const known = new Set(files);
  const graph = new Map(files.map((f) => [f, [] as string[]]));
  const unresolved: string[] = [];
  for (const e of edges.filter(relative)) {
    const target = resolveSource(e.to, known);
    if (target !== null) graph.get(e.from)!.push(target);
    else if (ROOTS.some((root) => inside(e.to, root)) && !fs.existsSync(path.join(REPO, e.to)))
      unresolved.push(`${e.from} imports '${e.specifier}'`);
  }
  // An import the reader cannot follow would hide the cycles that go through it.
  assert.deepEqual(unresolved, [], 'relative imports that name no file');
  assert.ok([...graph.values()].reduce((n, to) => n + to.length, 0) > files.length, 'too few relative imports resolved');
  const found = cycles(graph);
  assert.deepEqual(found, [], `import cycles:\n${found.join('\n')}`);
});

test('the rules catch each kind of wrong import', () => {
  const wrong: Edge[] = [
    { from: 'agent/telemetry/flusher.ts', to: 'agent/server/agentControl', specifier: '../server/agentControl' },
    { from: 'agent/slots/slotPool.ts', to: 'agent/runs/startGate', specifier: '../runs/startGate' },
    { from: 'agent/telemetry/flushLock.ts', to: 'agent/slots/openExclusiveFlock', specifier: '../slots/openExclusiveFlock' },
    { from: 'agent/slots/pgSlotBackend.ts', to: 'agent/telemetry/migrate', specifier: '../telemetry/migrate' },
    { from: 'agent/db/migrate.ts', to: 'agent/telemetry/flusher', specifier: '../telemetry/flusher' },
    { from: 'agent/slots/migrations/003_slot_backend.ts', to: 'agent/db/migrations', specifier: '../../db/migrations' },
    { from: 'agent/memory/groupSampler.ts', to: 'agent/runs/runGroup', specifier: '../runs/runGroup' },
    { from: 'agent/process/runGroup.ts', to: 'agent/runs/runStore', specifier: '../runs/runStore' },
    { from: 'agent/flock/procLocks.ts', to: 'agent/slots/slotLock', specifier: '../slots/slotLock' },
    { from: 'agent/station/instanceLock.ts', to: 'agent/runs/runLogFile', specifier: '../runs/runLogFile' },
    { from: 'agent/github/githubSyncCommand.ts', to: 'agent/cli/openLink', specifier: '../cli/openLink' },
    { from: 'agent/openAgent.ts', to: 'agent/cli/instanceLock', specifier: './cli/instanceLock' },
    { from: 'extension/agentTransport.ts', to: 'agent/client/wsText', specifier: '../agent/client/wsText' },
    { from: 'extension/agentTransport.ts', to: 'simulator/github/main', specifier: '../simulator/github/main' },
    { from: 'shared/protocol.ts', to: 'vscode', specifier: 'vscode' },
    { from: 'shared/protocol.ts', to: 'node:fs', specifier: 'node:fs' },
  ];
  // Each wrong edge is caught by at least one rule (an old and a new one may both name the same edge).
  assert.deepEqual(
    wrong.filter((e) => violations([e]).length === 0),
    [],
  );
  // And each rule catches one of them: no rule that cannot fail.
  assert.deepEqual(
    Object.keys(RULES).filter((rule) => !wrong.some(RULES[rule])),
    [],
  );
  const right: Edge[] = [
    { from: 'agent/runs/runManager.ts', to: 'agent/slots/slotPool', specifier: '../slots/slotPool' },
    { from: 'agent/memory/groupSampler.ts', to: 'agent/process/runGroup', specifier: '../process/runGroup' },
    { from: 'agent/process/runGroup.ts', to: 'shared/node/procInfo', specifier: '../../shared/node/procInfo' },
    { from: 'agent/station/unsafeStationError.ts', to: 'agent/errors', specifier: '../errors' },
    { from: 'agent/telemetry/flusher.ts', to: 'agent/db/migrate', specifier: '../db/migrate' },
    { from: 'agent/db/migrations.ts', to: 'agent/slots/migrations/003_slot_backend', specifier: '../slots/migrations/003_slot_backend' },
    { from: 'agent/slots/migrations/003_slot_backend.ts', to: 'agent/db/migration', specifier: '../../db/migration' },
    { from: 'agent/main.ts', to: 'agent/cli/runCli', specifier: './cli/runCli' },
    { from: 'agent/cli/githubCommand.ts', to: 'agent/github/parseRepos', specifier: '../github/parseRepos' },
    { from: 'extension/agentTransport.ts', to: 'shared/node/agentSocket', specifier: '../shared/node/agentSocket' },
    { from: 'extension/stationPanel.ts', to: 'node:path', specifier: 'node:path' },
    { from: 'shared/node/agentSocket.ts', to: 'ws', specifier: 'ws' },
  ];
  assert.deepEqual(violations(right), []);
});

test('the cycle finder names each loop, and none in a graph without one', () => {
  const graph = new Map([
    ['a.ts', ['b.ts']],
    ['b.ts', ['c.ts', 'd.ts']],
    ['c.ts', ['a.ts']],
    ['d.ts', ['e.ts']],
    ['e.ts', ['e.ts']],
  ]);
  assert.deepEqual(cycles(graph), ['a.ts -> b.ts -> c.ts -> a.ts', 'e.ts -> e.ts']);
  assert.deepEqual(
    cycles(
      new Map([
        ['a.ts', ['b.ts', 'c.ts']],
        ['b.ts', ['c.ts']],
        ['c.ts', []],
      ]),
    ),
    [],
  );
});
