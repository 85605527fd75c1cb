import * as fs from 'node:fs';
import { after, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { makeTestEnv, runCli, startAgent, type FetcherSpec, type TestEnv } from '../support/harness';

const stations: TestEnv[] = [];
after(() => {
  for (const s of stations) fs.rmSync(s.root, { recursive: true, force: true });
});

const LOCAL = /\b\d{4}-\d\d-\d\d \d\d:\d\d -03\b/;
const OTHER_FORMATS = /\d{4}-\d\d-\d\dT\d\d|\bago\b|\b[AP]M\b|\bUTC\b/;

test('status, schedule and runs show moments one way: local time with the zone (TZ=America/Sao_Paulo)', async () => {
  const scheduled = { name: 'comex', pool: 'network-light', argv: ['/bin/sh', '-c', 'echo ok'], schedule: '15 6 * * *' } as FetcherSpec;
  const t = makeTestEnv([scheduled], { TZ: 'America/Sao_Paulo' });
  stations.push(t);
  const agent = await startAgent(t);
  try {
    const ran = await runCli(t, ['run', 'comex']);
    assert.equal(ran.code, 0, ran.stderr);
    const outputs = {
      status: await runCli(t, ['status']),
      schedule: await runCli(t, ['schedule']),
      runs: await runCli({ ...t.env, NO_COLOR: '1' }, ['runs']),
    };
    for (const [command, r] of Object.entries(outputs)) {
      assert.equal(r.code, 0, `${command}: ${r.stderr}`);
      assert.match(r.stdout, LOCAL, `${command} shows a local moment: ${r.stdout}`);
      assert.doesNotMatch(r.stdout, OTHER_FORMATS, `${command} shows no other time format: ${r.stdout}`);
    }
    assert.match(outputs.status.stdout, new RegExp(`^agent: running, pid \\d+ since ${LOCAL.source}`, 'm'));
    assert.match(outputs.status.stdout, new RegExp(`next: comex ${LOCAL.source.replace(/\\b/g, '')}`));
    assert.match(outputs.schedule.stdout, /^NEXT\s+IN\s+LAST\s+AGO\s+FETCHER\s+CRON$/m);
    assert.match(
      outputs.schedule.stdout,
      /^\d{4}-\d\d-\d\d 06:15 -03\s+\d+ (s|min|h)[\d a-z]*\s+\d{4}-\d\d-\d\d \d\d:\d\d -03\s+\d+ s\s+comex\s+15 6 \* \* \*$/m,
    );
    assert.match(outputs.schedule.stdout, /^1 fetcher: 1 will run at their NEXT time; catch-up off: /m);
    assert.match(outputs.runs.stdout, /^RUN\s+FETCHER\s+POOL\s+STATUS\s+EXIT\s+STARTED\s+DURATION/m);
    assert.match(
      outputs.runs.stdout,
      new RegExp(`comex\\s+network-light\\s+completed\\s+0\\s+${LOCAL.source.replace(/\\b/g, '')}\\s+\\d+ s`),
    );

    // The same moment in UTC is three hours later, and says UTC.
    const utc = await runCli({ ...t.env, TZ: 'UTC', NO_COLOR: '1' }, ['runs']);
    const local = /(\d{4}-\d\d-\d\d \d\d:\d\d) -03/.exec(outputs.runs.stdout)?.[1] ?? '';
    const inUtc = /(\d{4}-\d\d-\d\d \d\d:\d\d) UTC/.exec(utc.stdout)?.[1] ?? '';
    assert.equal(
      Date.parse(`${inUtc.replace(' ', 'T')}:00Z`) - Date.parse(`${local.replace(' ', 'T')}:00Z`),
      3 * 3600_000,
      `${local} -03 is ${inUtc} UTC`,
    );
  } finally {
    agent.child.kill('SIGTERM');
    await new Promise((resolve) => agent.child.once('exit', resolve));
  }
});
