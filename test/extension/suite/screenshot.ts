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

/**
 * The inner text of every element of the workbench page matching `selector` (a playwright
 * selector), read by the runner (which drives the browser): after it clicked the first one when
 * `click`, after one showing `waitText` appeared (waiting in the page) when given. Null without such
 * a runner (test-electron). Start it before what makes the text appear when that shows briefly.
 * `press` (playwright key names, e.g. 'Shift+F10') is pressed on the page first.
 */
export async function queryPage(
  selector: string,
  options: { click?: boolean; waitText?: string; timeoutMs?: number; html?: boolean; press?: string } = {},
): Promise<string[] | null> {
  const dir = process.env.QUANTILICA_TEST_SCREENSHOTS;
  if (!dir) return null;
  const name = `query-${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;
  const answer = path.join(dir, `${name}.answer`);
  // Written whole, then renamed: the runner reacts to the name and must not read half a query.
  fs.writeFileSync(path.join(dir, `${name}.tmp`), JSON.stringify({ selector, ...options }));
  fs.renameSync(path.join(dir, `${name}.tmp`), path.join(dir, `${name}.query`));
  const json = await waitFor(() => fs.existsSync(answer) && fs.readFileSync(answer, 'utf8'), {
    what: `the runner to read ${selector}`,
    timeoutMs: (options.timeoutMs ?? 0) + 20_000,
    intervalMs: 50,
  });
  fs.rmSync(answer, { force: true });
  const parsed = JSON.parse(json) as { texts?: string[]; error?: string };
  if (parsed.error !== undefined) throw new Error(`the page query ${selector} failed: ${parsed.error}`);
  return parsed.texts ?? [];
}
