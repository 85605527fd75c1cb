import * as path from 'node:path';
import { runMocha } from '../suite/runMocha';

// The extensionTestsPath of the packaging check: the .vsix installed into code-server.
export function run(): Promise<void> {
  return runMocha([path.join(__dirname, 'installedVsix.test.js')], 120_000);
}
