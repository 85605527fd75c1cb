import * as fs from 'node:fs';
import { z } from 'zod';
import type { ConnectionInfo } from '../protocol';
import { checkAgentLiveness } from './agentIdentity';

// How a client (the CLI, the extension) finds the agent: the connection file the agent writes
// (agent/server/connectionFile.ts), read without trusting anything in it until it is checked.

/** Why a connection file cannot be trusted or used; the message says what to do about it. */
export class ConnectionFileError extends Error {
  constructor(
    readonly file: string,
    readonly reason: 'missing' | 'unsafe' | 'invalid' | 'stale',
    message: string,
  ) {
    super(message);
    this.name = 'ConnectionFileError';
  }
}

const connectionInfoSchema = z
  .object({
    port: z.number().int().min(1).max(65535),
    token: z.string().regex(/^[A-Za-z0-9_-]{22,256}$/, 'a base64url token of at least 128 bits'),
    pid: z.number().int().positive(),
    protocolVersion: z.number().int().nonnegative(),
    uid: z.number().int().optional(),
    startTime: z.number().int().nonnegative().optional(),
    bootId: z.string().max(64).optional(),
  })
  .strict();

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
      throw new ConnectionFileError(
        file,
        'missing',
        `no agent connection file at ${file}: the agent is not running (start it with \`quantilica agent\`)`,
      );
    }
    if (code === 'ELOOP' || code === 'EMLINK') {
      throw new ConnectionFileError(
        file,
        'unsafe',
        `refusing the connection file ${file}: it is a symbolic link; the agent writes a regular file, remove the link and restart the agent`,
      );
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
      throw new ConnectionFileError(
        file,
        'unsafe',
        `refusing the connection file ${file}: it is owned by uid ${stat.uid}, not by you (uid ${uid}); another user may have planted it`,
      );
    }
    const mode = stat.mode & 0o777;
    if (mode !== 0o600) {
      throw new ConnectionFileError(
        file,
        'unsafe',
        `refusing the connection file ${file}: its mode is ${mode.toString(8).padStart(4, '0')}, it must be 0600 because it holds the agent's token (run \`chmod 600 ${file}\` if you trust it, or restart the agent)`,
      );
    }
    if (stat.size > 4096) {
      throw new ConnectionFileError(
        file,
        'invalid',
        `refusing the connection file ${file}: ${stat.size} bytes is too large for a connection file`,
      );
    }
    const text = await handle.readFile('utf8');
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (err) {
      throw new ConnectionFileError(
        file,
        'invalid',
        `the connection file ${file} is not valid JSON (${(err as Error).message}); restart the agent to rewrite it`,
      );
    }
    const parsed = connectionInfoSchema.safeParse(json);
    if (!parsed.success) {
      const problems = parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
      throw new ConnectionFileError(
        file,
        'invalid',
        `the connection file ${file} is malformed (${problems}); restart the agent to rewrite it`,
      );
    }
    return parsed.data;
  } finally {
    await handle.close();
  }
}

/** The connection file's content, if the agent it names is alive; a `stale` ConnectionFileError otherwise. */
export async function readLiveConnectionFile(connectionFile: string): Promise<ConnectionInfo> {
  const info = await readConnectionFile(connectionFile);
  const liveness = checkAgentLiveness(info);
  if (!liveness.live) {
    throw new ConnectionFileError(
      connectionFile,
      'stale',
      `the connection file ${connectionFile} is left from an agent that is gone: ${liveness.reason}`,
    );
  }
  return info;
}
