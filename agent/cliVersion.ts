import * as fs from 'node:fs';
import * as path from 'node:path';

/** The package's version, read from the package.json beside `dist/` (the repository or the .vsix). */
export function cliVersion(): string {
  try {
    const text = fs.readFileSync(path.join(__dirname, '..', 'package.json'), 'utf8');
    const version = (JSON.parse(text) as { version?: unknown }).version;
    return typeof version === 'string' ? version : 'unknown';
  } catch {
    return 'unknown';
  }
}
