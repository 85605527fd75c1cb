import * as path from 'node:path';
import { runMocha } from './runMocha';

/** The suite's files in order; QUANTILICA_TEST_FILES (comma-separated substrings) runs some of them. */
const FILES = ['workbench.test.js', 'operatorDay.test.js', 'operatorHealth.test.js', 'operatorWorkbench.test.js', 'githubSync.test.js'];

// The extensionTestsPath of the development suite (runOffline.mjs, runElectron.mjs).
export function run(): Promise<void> {
  const only = (process.env.QUANTILICA_TEST_FILES ?? '').split(',').filter((s) => s !== '');
  const files = FILES.filter((f) => only.length === 0 || only.some((s) => f.includes(s)));
  return runMocha(
    files.map((f) => path.join(__dirname, f)),
    120_000,
  );
}
