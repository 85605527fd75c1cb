import * as fs from 'node:fs';
import * as path from 'node:path';

/**
 * A catalog of small real fetchers for the operator's-day suite: one that prints a numbered line
 * every 0.3 s, one that fails with exit 3, one that completes at once (with a schedule), one that
 * sleeps until cancelled. Written into `dir`; returns its path for QUANTILICA_CATALOG.
 */
export function writeOperatorCatalog(dir: string): string {
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'catalog.json');
  const bash = (script: string) => ['/bin/bash', '-c', script];
  fs.writeFileSync(
    file,
    JSON.stringify(
      {
        fetchers: [
          { name: 'printer', pool: 'network-light', argv: bash('for i in $(seq 1 40); do echo "printer line $i"; sleep 0.3; done') },
          { name: 'failer', pool: 'cpu-analysis', argv: bash('echo "boom: the source answered 503"; exit 3') },
          { name: 'quick', pool: 'cpu-analysis', argv: bash('echo "quick ok"'), schedule: '0 3 * * *', timezone: 'America/Sao_Paulo' },
          { name: 'sleeper', pool: 'heavy-io', argv: bash('echo "sleeper starts"; exec sleep 600'), schedule: '30 4 * * *' },
        ],
      },
      null,
      2,
    ),
  );
  return file;
}
