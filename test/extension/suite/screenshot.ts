import * as fs from 'node:fs';
import * as path from 'node:path';
import { waitFor } from '../../support/waitFor';

/**
 * Asks the runner (which drives the browser) for a screenshot of the workbench as it is now: a
 * request file in the shared test directory, answered by a done file. Without a runner that
 * answers (test-electron) there is no page to capture, and the request is skipped.
 */
export async function requestScreenshot(name: string): Promise<void> {
  const dir = process.env.QUANTILICA_TEST_SCREENSHOTS;
  if (!dir) return;
  const done = path.join(dir, `${name}.done`);
  fs.rmSync(done, { force: true });
  fs.writeFileSync(path.join(dir, `${name}.request`), '');
  await waitFor(() => fs.existsSync(done), { what: `the runner to capture ${name}`, timeoutMs: 20_000, intervalMs: 50 });
}
