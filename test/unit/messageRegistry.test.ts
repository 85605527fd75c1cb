// The message registry (shared/messages.ts) against what the agent's server does with it: every
// request it lists has a schema and a handler and nothing else has either, and each schema refuses a
// bad param with an error that names the field.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ResponseError } from 'vscode-jsonrpc';
import { z } from 'zod';
import * as messages from '../../shared/messages';
import { NOTIFICATIONS, REQUESTS, type RequestMethod } from '../../shared/messages';
import type { AgentControl } from '../../agent/server/agentControl';
import { parseParams } from '../../agent/server/parseParams';
import { requestHandlers } from '../../agent/server/requestHandlers';

const INVALID_PARAMS = -32602;

/** Per method: params its schema accepts, params it refuses, and what the refusal must name. */
const CASES: Record<RequestMethod, { good: unknown; bad: unknown; names: RegExp }> = {
  initialize: { good: { processId: 1, capabilities: {} }, bad: 'lsp', names: /params: Expected object, received string/ },
  shutdown: { good: undefined, bad: { force: true }, names: /params: Unrecognized key\(s\) in object: 'force'/ },
  'quantilica/hello': {
    good: { protocolVersion: 1, client: 'test' },
    bad: { protocolVersion: -1, client: 'test' },
    names: /protocolVersion: Number must be greater than or equal to 0/,
  },
  'quantilica/snapshot': { good: null, bad: { all: true }, names: /params: Unrecognized key\(s\) in object: 'all'/ },
  'quantilica/run': {
    good: { fetcher: 'alpha', args: ['--day=1'] },
    bad: { fetcher: '../../bin/sh' },
    names: /fetcher: must be a catalog fetcher name/,
  },
  'quantilica/waitRun': { good: { runId: 'r1' }, bad: { runId: '/etc/passwd' }, names: /runId: must be a run id/ },
  'quantilica/cancel': {
    good: { fetcher: 'alpha' },
    bad: { runId: 'r1', fetcher: 'alpha' },
    names: /give exactly one of runId or fetcher/,
  },
  'quantilica/runs': { good: { limit: 10 }, bad: { limit: 0 }, names: /limit: Number must be greater than or equal to 1/ },
  'quantilica/tailLog': {
    good: { runId: 'r1', maxBytes: 1024 },
    bad: { runId: 'r1', maxBytes: 1e9 },
    names: /maxBytes: Number must be less than or equal to 262144/,
  },
  'quantilica/flush': {
    good: { workDoneToken: 'flush-1' },
    bad: { workDoneToken: 1.5 },
    names: /workDoneToken: Expected integer, received float/,
  },
  'quantilica/schedule/setPaused': {
    good: { paused: true, fetcher: 'alpha' },
    bad: { paused: 'yes' },
    names: /paused: Expected boolean, received string/,
  },
  'quantilica/readLog': {
    good: { runId: 'r1', offset: 0 },
    bad: { runId: 'r1', offset: -1 },
    names: /offset: Number must be greater than or equal to 0/,
  },
  'quantilica/history': { good: { hours: 24 }, bad: { hours: 49 }, names: /hours: Number must be less than or equal to 48/ },
  'quantilica/events': {
    good: { after: 3, waitMs: 100 },
    bad: { waitMs: 60_001 },
    names: /waitMs: Number must be less than or equal to 60000/,
  },
  'quantilica/metrics': { good: {}, bad: { format: 'json' }, names: /params: Unrecognized key\(s\) in object: 'format'/ },
};

const sorted = (keys: Iterable<string>) => [...keys].sort();

test('each registry entry is keyed by its method, with a zod schema and a message type of that method', () => {
  assert.ok(Object.keys(REQUESTS).length >= 15, 'the registry lists the requests');
  for (const [key, entry] of Object.entries(REQUESTS)) {
    assert.equal(entry.method, key);
    assert.equal(entry.type.method, key);
    assert.ok(entry.params instanceof z.ZodType, `${key} has a zod schema`);
  }
  for (const [key, entry] of Object.entries(NOTIFICATIONS)) {
    assert.equal(entry.method, key);
    assert.equal(entry.type.method, key);
  }
});

test('every message declared in shared/messages.ts is in the registry, once', () => {
  const declared = Object.values(messages as Record<string, unknown>)
    .filter(
      (value): value is { method: string; type: { method: string } } =>
        typeof value === 'object' && value !== null && 'method' in value && 'type' in value,
    )
    .map((m) => m.method);
  assert.ok(declared.length >= 16, `found ${declared.length} message namespaces`);
  const registered = [...Object.keys(REQUESTS), ...Object.keys(NOTIFICATIONS)];
  assert.equal(new Set(registered).size, registered.length, 'no method is both a request and a notification');
  assert.deepEqual(sorted(declared), sorted(registered));
});

test('the server has a handler for every request of the registry and for nothing else', () => {
  // Building the table calls nothing of the control: handlers use it only when a request arrives.
  const handlers = requestHandlers({} as AgentControl);
  assert.deepEqual(sorted(Object.keys(handlers)), sorted(Object.keys(REQUESTS)));
  for (const [method, handler] of Object.entries(handlers)) assert.equal(typeof handler, 'function', method);
});

test('every request has a case here, so each schema below is tried both ways', () => {
  assert.deepEqual(sorted(Object.keys(CASES)), sorted(Object.keys(REQUESTS)));
});

for (const method of Object.keys(CASES) as RequestMethod[]) {
  test(`${method}: good params pass, a bad one is refused naming its field`, () => {
    const { good, bad, names } = CASES[method];
    assert.doesNotThrow(() => parseParams(method, good));
    assert.throws(
      () => parseParams(method, bad),
      (err: unknown) => {
        assert.ok(err instanceof ResponseError, `a ResponseError, not ${String(err)}`);
        assert.equal(err.code, INVALID_PARAMS);
        assert.ok(err.message.startsWith(`invalid params for ${method}: `), err.message);
        assert.match(err.message, names);
        return true;
      },
    );
  });
}

test('params a client may leave out reach the handler as undefined, whether absent or null', () => {
  for (const method of ['quantilica/runs', 'quantilica/flush', 'quantilica/history', 'quantilica/events', 'quantilica/snapshot'] as const) {
    assert.equal(parseParams(method, null), undefined, method);
    assert.equal(parseParams(method, undefined), undefined, method);
  }
  assert.throws(() => parseParams('quantilica/hello', null), {
    code: INVALID_PARAMS,
    message: /invalid params for quantilica\/hello: params: Expected object, received null/,
  });
});
