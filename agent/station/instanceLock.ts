import * as fs from 'node:fs';
import * as path from 'node:path';
import { flockSync } from 'fs-ext';
import { EnvironmentError } from '../errors';
import { kernelLockOf, readKernelFlocks } from '../flock/procLocks';

/**
 * One agent per user and host: an exclusive flock(2) on `QUANTILICA_HOME/agent.flock`. The kernel
 * holds it exactly as long as the agent's process lives, across any stall (SIGSTOP, swap, a
 * suspended VM), and drops it at once on a kill -9; a lease renewed on a timer (the old
 * proper-lockfile lock) expires while the holder is stopped and lets a second agent in. The file is
 * opened without following links and checked on the descriptor (a regular file of this user, one
 * link) before it is trusted. Node opens with O_CLOEXEC, so no fetcher inherits the lock.
 */
export function takeInstanceLock(homeDir: string): () => void {
  const file = path.join(homeDir, 'agent.flock');
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK, 0o600);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? String(err);
    const why = code === 'ELOOP' ? 'it is a symbolic link; remove it' : code;
    throw new EnvironmentError(`QUANTILICA_HOME=${homeDir}: cannot open the agent lock ${file} (${why})`);
  }
  try {
    const stat = fs.fstatSync(fd);
    const uid = process.getuid?.();
    if (!stat.isFile() || stat.nlink !== 1 || (uid !== undefined && stat.uid !== uid)) {
      throw new EnvironmentError(
        `QUANTILICA_HOME=${homeDir}: refusing the agent lock ${file}: it must be a regular file of yours with one link (remove it and start again)`,
      );
    }
    try {
      flockSync(fd, 'exnb');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EAGAIN' || code === 'EWOULDBLOCK') {
        const holder = readHolder(fd);
        throw new EnvironmentError(
          `another agent is running for this user${holder ? ` (pid ${holder})` : ''} (lock ${file}); stop it first or use its CLI`,
        );
      }
      throw new EnvironmentError(`cannot take the agent lock ${file} (${code ?? String(err)})`);
    }
    // The holder's pid, for the message of the next agent and for people; the lock is the flock.
    fs.ftruncateSync(fd, 0);
    fs.writeSync(fd, `${process.pid}\n`, 0);
  } catch (err) {
    fs.closeSync(fd);
    throw err;
  }
  return () => fs.closeSync(fd);
}

function readHolder(fd: number): number | null {
  const buffer = Buffer.alloc(32);
  try {
    const read = fs.readSync(fd, buffer, 0, buffer.length, 0);
    const pid = Number(buffer.subarray(0, read).toString('utf8').trim());
    return Number.isInteger(pid) && pid > 0 ? pid : null;
  } catch {
    return null;
  }
}

/**
 * The pid of the live agent holding the instance lock, or null when no process holds it: read from
 * the kernel's lock table by the file's identity (lstat, never through a link), so looking takes
 * nothing and cannot race an agent that is starting.
 */
export function instanceLockHolder(homeDir: string): number | null {
  let st: fs.Stats;
  try {
    st = fs.lstatSync(path.join(homeDir, 'agent.flock'));
  } catch {
    return null;
  }
  if (!st.isFile()) return null;
  return kernelLockOf(readKernelFlocks(), st)?.pid ?? null;
}
