import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { z } from 'zod';
import type { ConnectionInfo } from '../../shared/protocol';

/** Why a connection file cannot be trusted or used; the message says what to do about it. */
export class ConnectionFileError extends Error {
  constructor(readonly file: string, readonly reason: 'missing' | 'unsafe' | 'invalid' | 'stale', message: string) {
    super(message);
    this.name = 'ConnectionFileError';
  }
}

const connectionInfoSchema = z.object({
  port: z.number().int().min(1).max(65535),
  token: z.string().regex(/^[A-Za-z0-9_-]{22,256}$/, 'a base64url token of at least 128 bits'),
  pid: z.number().int().positive(),
  protocolVersion: z.number().int().nonnegative(),
  uid: z.number().int().optional(),
  startTime: z.number().int().nonnegative().optional(),
  bootId: z.string().max(64).optional(),
}).strict();

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

/**
 * Reads and checks a connection file before anything in it is used: a regular file (not a symbolic
 * link), owned by the current user, mode exactly 0600, holding a well-formed `ConnectionInfo`. The
 * file is opened with O_NOFOLLOW and checked through the open descriptor, so it cannot be swapped
 * between the check and the read.
 */
export async function readConnectionFile(file: string): Promise<ConnectionInfo> {
  let handle: fs.promises.FileHandle;
  try {
    handle = await fs.promises.open(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') {
      throw new ConnectionFileError(file, 'missing', `no agent connection file at ${file}: the agent is not running (start it with \`quantilica agent\`)`);
    }
    if (code === 'ELOOP' || code === 'EMLINK') {
      throw new ConnectionFileError(file, 'unsafe', `refusing the connection file ${file}: it is a symbolic link; the agent writes a regular file, remove the link and restart the agent`);
    }
    throw new ConnectionFileError(file, 'unsafe', `cannot open the connection file ${file}: ${code ?? String(err)}`);
  }
  try {
    const stat = await handle.stat();
    if (!stat.isFile()) {
      throw new ConnectionFileError(file, 'unsafe', `refusing the connection file ${file}: it is not a regular file`);
    }
    const uid = process.getuid?.();
    if (uid !== undefined && stat.uid !== uid) {
      throw new ConnectionFileError(file, 'unsafe', `refusing the connection file ${file}: it is owned by uid ${stat.uid}, not by you (uid ${uid}); another user may have planted it`);
    }
    const mode = stat.mode & 0o777;
    if (mode !== 0o600) {
      throw new ConnectionFileError(file, 'unsafe', `refusing the connection file ${file}: its mode is ${mode.toString(8).padStart(4, '0')}, it must be 0600 because it holds the agent's token (run \`chmod 600 ${file}\` if you trust it, or restart the agent)`);
    }
    if (stat.size > 4096) {
      throw new ConnectionFileError(file, 'invalid', `refusing the connection file ${file}: ${stat.size} bytes is too large for a connection file`);
    }
    const text = await handle.readFile('utf8');
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (err) {
      throw new ConnectionFileError(file, 'invalid', `the connection file ${file} is not valid JSON (${(err as Error).message}); restart the agent to rewrite it`);
    }
    const parsed = connectionInfoSchema.safeParse(json);
    if (!parsed.success) {
      const problems = parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
      throw new ConnectionFileError(file, 'invalid', `the connection file ${file} is malformed (${problems}); restart the agent to rewrite it`);
    }
    return parsed.data;
  } finally {
    await handle.close();
  }
}
