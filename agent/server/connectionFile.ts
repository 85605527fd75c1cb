import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { ConnectionInfo } from '../../shared/protocol';

// The agent's side of the connection file; clients read it with shared/node/connectionFile.ts.

/**
 * Writes the connection file readable by its owner alone: the directory is created 0700, the content
 * goes to a temporary file created 0600 that is renamed over the old one, so a reader never sees a
 * half-written file or a moment with looser permissions.
 */
export async function writeConnectionFile(file: string, info: ConnectionInfo): Promise<void> {
  await fs.promises.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
  const temp = `${file}.${process.pid}.${crypto.randomBytes(4).toString('hex')}.tmp`;
  const handle = await fs.promises.open(temp, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o600);
  try {
    // The umask cannot loosen 0600, but an inherited ACL default could: set the mode explicitly.
    await handle.chmod(0o600);
    await handle.writeFile(`${JSON.stringify(info)}\n`, 'utf8');
    await handle.sync();
  } finally {
    await handle.close();
  }
  try {
    await fs.promises.rename(temp, file);
  } catch (err) {
    await fs.promises.rm(temp, { force: true });
    throw err;
  }
}

/**
 * Removes the connection file if it still names this agent: a newer agent may have replaced it, and
 * its clients must keep finding it.
 */
export async function removeConnectionFile(file: string, token: string): Promise<void> {
  let text: string;
  try {
    text = await fs.promises.readFile(file, 'utf8');
  } catch {
    return;
  }
  const mine = (() => {
    try {
      return (JSON.parse(text) as { token?: unknown }).token === token;
    } catch {
      return false;
    }
  })();
  if (mine) await fs.promises.rm(file, { force: true });
}
