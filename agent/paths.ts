import * as fs from 'node:fs';
import * as path from 'node:path';

/**
 * A file shipped in dist/ beside the bundled agent (the run wrapper, the agent itself). When this
 * code runs from the bundle, that is its own folder; from compiled sources (tests), the repo's dist/.
 */
export function distFile(name: string): string {
  const beside = path.join(__dirname, name);
  if (fs.existsSync(beside)) return beside;
  let dir = __dirname;
  while (!fs.existsSync(path.join(dir, 'package.json'))) {
    const parent = path.dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  return path.join(dir, 'dist', name);
}
