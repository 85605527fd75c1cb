import * as path from 'node:path';
import { runMocha } from './runMocha';

// The extensionTestsPath of the development suite (runOffline.mjs, runElectron.mjs).
export function run(): Promise<void> {
  return runMocha([path.join(__dirname, 'workbench.test.js')], 120_000);
}
