// A fetcher's environment is built once per catalog entry and once more per run for the run's own
// variables: together they must be exactly what fetcherEnv gives, secrets withheld, on either spawner.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SECRET_SETTINGS } from '../../agent/config/settings';
import { fetcherEnv, sharedFetcherEnv, type FetcherEnvInput } from '../../agent/runs/fetcherEnv';
import { encodeRequest } from '../../agent/runs/nativeSpawner';
import type { SpawnOptions } from '../../agent/runs/runProcess';

const OWN = new Set(['QUANTILICA_RUN_ID', 'QUANTILICA_SLOT', 'QUANTILICA_CGROUP_PROCS']);

function input(run: Record<string, string>): FetcherEnvInput {
  const base: NodeJS.ProcessEnv = { PATH: '/usr/bin', LANG: 'C.UTF-8', QUANTILICA_CGROUP_PROCS: '/sys/fs/cgroup/someone-else' };
  for (const name of SECRET_SETTINGS) base[name] = `secret-of-${name}`;
  return { base, entryEnv: { SOURCE: 'comex', LANG: 'pt_BR.UTF-8' }, passEnv: ['GITHUB_TOKEN'], run, fetcherUmask: '0022' };
}

/** The `NAME=value` entries of an encoded spawn request, as the native spawner reads them. */
function requestEnv(request: Buffer): string[] {
  // id, lockFd, logFd, logName, statusFile, cwd, argc, argv…, envc, env… (nativeSpawner.ts, encodeRequest)
  const fields = request.subarray(4).toString('utf8').split('\0').slice(0, -1);
  const argc = Number(fields[6]);
  const envc = Number(fields[7 + argc]);
  const env = fields.slice(8 + argc);
  assert.equal(env.length, envc, 'the count sent is the number of variables sent');
  return env;
}

const spawnOptions = (env: NodeJS.ProcessEnv, shared?: SpawnOptions['shared']): SpawnOptions => ({
  wrapperPath: '',
  statusFile: '/nonexistent/r1.exit',
  argv: ['/bin/true', 'a b'],
  cwd: '/',
  env,
  ...(shared ? { shared } : {}),
  logFd: 7,
  lockFd: 8,
});

test("the shared part and the run's own variables make up the fetcher's environment, secrets withheld", () => {
  const own = { QUANTILICA_RUN_ID: 'r1', QUANTILICA_SLOT: '2' };
  const shared = sharedFetcherEnv(input({ DATA_DIR: '/data' }), OWN);
  const whole = fetcherEnv(input({ DATA_DIR: '/data', ...own }));
  // The inherited cgroup path is a run's own variable: a run without a cgroup gets none, not the agent's.
  delete whole.QUANTILICA_CGROUP_PROCS;
  assert.deepEqual({ ...shared.vars, ...own }, whole);
  assert.equal(shared.count, Object.keys(shared.vars).length);
  for (const name of OWN) assert.equal(shared.vars[name], undefined, `${name} is never shared`);
  for (const name of SECRET_SETTINGS.filter((n) => n !== 'GITHUB_TOKEN')) assert.equal(shared.vars[name], undefined, `${name} is withheld`);
  assert.equal(shared.vars.GITHUB_TOKEN, 'secret-of-GITHUB_TOKEN', 'passEnv still passes a secret');
  assert.equal(shared.vars.LANG, 'pt_BR.UTF-8', "the entry's variables win over the agent's");
  assert.equal(shared.vars.QUANTILICA_FETCHER_UMASK, '0022');
});

test('a request with a shared part sends the same variables as one with the whole environment', () => {
  const own = {
    QUANTILICA_RUN_ID: 'r1',
    QUANTILICA_SLOT: '2',
    QUANTILICA_CGROUP_PROCS: '/sys/fs/cgroup/memory/q/heavy-io/r1/cgroup.procs',
  };
  const shared = sharedFetcherEnv(input({ DATA_DIR: '/data' }), OWN);
  const split = encodeRequest('9', spawnOptions(own, shared));
  const whole = encodeRequest('9', spawnOptions({ ...shared.vars, ...own }));
  assert.deepEqual(requestEnv(split).sort(), requestEnv(whole).sort());
  assert.equal(split.readUInt32LE(0), split.length - 4, 'the length prefix covers the whole body');
  // Everything before the environment is the same, byte for byte.
  const head = (b: Buffer) => b.subarray(0, b.indexOf('/bin/true\0a b\0') + '/bin/true\0a b\0'.length).toString('latin1');
  assert.equal(head(split).slice(4), head(whole).slice(4));
  // Without any variable at all the request still ends with its count.
  assert.deepEqual(requestEnv(encodeRequest('9', spawnOptions({}))), []);
});

test("a NUL byte or a run's own variable inside the shared part is refused, not sent", () => {
  assert.throws(() => sharedFetcherEnv({ ...input({}), entryEnv: { BAD: 'a\0b' } }, OWN), /NUL byte/);
  const shared = sharedFetcherEnv(input({ DATA_DIR: '/data' }), OWN);
  assert.throws(
    () => encodeRequest('9', spawnOptions({ DATA_DIR: '/elsewhere' }, shared)),
    /DATA_DIR is both a shared and a run's own variable/,
  );
  assert.throws(() => encodeRequest('9', spawnOptions({ QUANTILICA_RUN_ID: 'r\0' }, shared)), /NUL byte/);
});
