import * as path from 'node:path';
import Mocha from 'mocha';

/**
 * Runs mocha test files inside the extension host and rejects when any fails: VS Code calls the
 * `run` export of the extensionTestsPath module and reports its outcome as the exit code.
 */
export function runMocha(files: string[], timeoutMs: number): Promise<void> {
  const mocha = new Mocha({ ui: 'bdd', color: false, timeout: timeoutMs, reporter: 'spec' });
  for (const file of files) mocha.addFile(path.resolve(file));
  return new Promise((resolve, reject) => {
    mocha.run((failures) => (failures > 0 ? reject(new Error(`${failures} extension-host test(s) failed`)) : resolve()));
  });
}
