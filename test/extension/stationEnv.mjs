// The station the extension-host suites run against: a private HOME, lock and data dirs, the demo
// catalog with long-running fetchers that write nothing, and a real PostgreSQL for the telemetry.
import * as fs from 'node:fs';
import * as path from 'node:path';

/** The environment of the VS Code host, inherited by its extension host and the agents they start. */
export function stationEnv(dir, databaseUrl) {
  const home = path.join(dir, 'home');
  fs.mkdirSync(home, { recursive: true });
  return {
    home,
    env: {
      ...process.env,
      HOME: home,
      QUANTILICA_LOCK_DIR: path.join(dir, 'locks'),
      DATA_DIR: path.join(dir, 'data'),
      CRON_USE_POOLS: 'true',
      QUANTILICA_SCHEDULE_CATCH_UP: 'false',
      QUANTILICA_DEMO_SECONDS: '600',
      QUANTILICA_DEMO_RATE_MB: '0',
      QUANTILICA_CANCEL_GRACE_SECONDS: '1',
      QUANTILICA_STOP_FETCHERS_ON_EXIT: 'true',
      QUANTILICA_HEARTBEAT_SECONDS: '1',
      QUANTILICA_DATABASE_URL: databaseUrl,
      // The agents the suite starts run on this Node, the one the native modules were built for.
      QUANTILICA_TEST_NODE: process.execPath,
      QUANTILICA_TEST_SCREENSHOTS: path.join(dir, 'screenshots'),
    },
  };
}
