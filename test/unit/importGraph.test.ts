import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import ts from 'typescript';

// Dependencies point one way (extension -> shared <- agent; inside the agent, the low layers never
// reach up into the server or the run manager). This reads every import of the sources, as written,
// with the TypeScript pre-processor (static, dynamic and `require` alike) and checks the rules.

const REPO = path.resolve(__dirname, '..', '..', '..');

interface Edge { from: string; to: string; specifier: string }

function sources(dir: string): string[] {
  return fs.readdirSync(path.join(REPO, dir), { recursive: true, encoding: 'utf8' })
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

/** The rules, one function per rule; each returns the edges that break it. */
const RULES: Record<string, (e: Edge) => boolean> = {
  'agent/telemetry and agent/slots do not import agent/server or agent/runs': (e) =>
    (inside(e.from, 'agent/telemetry') || inside(e.from, 'agent/slots')) && (inside(e.to, 'agent/server') || inside(e.to, 'agent/runs')),
  'extension/ imports nothing of agent/': (e) => inside(e.from, 'extension') && inside(e.to, 'agent'),
  'shared/ imports nothing of agent/, extension/ or vscode': (e) =>
    inside(e.from, 'shared') && (inside(e.to, 'agent') || inside(e.to, 'extension') || e.to === 'vscode' || e.to.startsWith('vscode-languageclient')),
  // shared/node/ holds the Node-side client helpers (connection file, socket); the rest of shared/ is
  // the pure protocol, usable anywhere.
  'shared/ outside shared/node imports no Node-only module': (e) =>
    inside(e.from, 'shared') && !inside(e.from, 'shared/node') && (e.to.startsWith('node:') || e.to === 'ws' || inside(e.to, 'shared/node')),
};

function violations(edges: Edge[]): string[] {
  return Object.entries(RULES).flatMap(([rule, breaks]) => edges.filter(breaks).map((e) => `${rule}: ${e.from} imports '${e.specifier}'`));
}

test('the import graph of agent/, extension/ and shared/ points one way', () => {
  const files = [...sources('agent'), ...sources('extension'), ...sources('shared')];
  // A reader that finds nothing would pass vacuously.
  assert.ok(files.length > 100, `only ${files.length} source files found under ${REPO}`);
  const edges = files.flatMap(importsOf);
  assert.ok(edges.some((e) => e.from === 'agent/cli/agentCommand.ts' && inside(e.to, 'agent')), 'relative imports were not resolved');
  assert.deepEqual(violations(edges), []);
});

test('the rules catch each kind of wrong import', () => {
  const wrong: Edge[] = [
    { from: 'agent/telemetry/flusher.ts', to: 'agent/server/agentControl', specifier: '../server/agentControl' },
    { from: 'agent/slots/slotPool.ts', to: 'agent/runs/startGate', specifier: '../runs/startGate' },
    { from: 'extension/agentTransport.ts', to: 'agent/client/wsText', specifier: '../agent/client/wsText' },
    { from: 'shared/protocol.ts', to: 'vscode', specifier: 'vscode' },
    { from: 'shared/protocol.ts', to: 'node:fs', specifier: 'node:fs' },
  ];
  assert.equal(violations(wrong).length, wrong.length);
  const right: Edge[] = [
    { from: 'agent/runs/runManager.ts', to: 'agent/slots/slotPool', specifier: '../slots/slotPool' },
    { from: 'extension/agentTransport.ts', to: 'shared/node/agentSocket', specifier: '../shared/node/agentSocket' },
    { from: 'shared/node/agentSocket.ts', to: 'ws', specifier: 'ws' },
  ];
  assert.deepEqual(violations(right), []);
});
