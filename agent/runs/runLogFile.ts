import * as fs from 'node:fs';
import * as path from 'node:path';
import { privatePolicy } from '../station/stationPolicy';
import { UnsafeStationError } from '../station/unsafeStationError';
import { dirProblem, ensureVerifiedDir } from '../station/verifiedDir';

/** Linux's O_CLOEXEC (Node does not export it; libuv sets it anyway: this says so at the call). */
const O_CLOEXEC = 0o2000000;
const { O_RDONLY, O_RDWR, O_APPEND, O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK, O_DIRECTORY } = fs.constants;

/** Why a log folder others can write is refused (the message of UnsafeStationError). */
export const LOG_DIR_WHY =
  'another account could swap a running log for a link to one of your files, which the log cap would then cut and the log views would show';

/** The setting that names the log folder, for messages: QUANTILICA_LOG_DIR when set, else DATA_DIR. */
export function logDirSetting(logDir: string, dataDir: string): string {
  return path.resolve(logDir) === path.resolve(dataDir, 'logs') ? 'DATA_DIR' : 'QUANTILICA_LOG_DIR';
}

/** Makes the log folder (0700) if missing and checks it like the lock folder: ours, no link, nobody else writes. */
export function ensureLogDir(logDir: string, setting: string): void {
  ensureVerifiedDir(logDir, privatePolicy(), setting, LOG_DIR_WHY);
}

/**
 * Creates a run's log: inside the log folder opened and checked on its descriptor, never through a
 * link, never an existing file (O_EXCL: a name planted before the run is refused, not appended to),
 * 0600. One open file description, read-write and append-only, serves the fetcher (its stdout and
 * stderr) and the agent (cap and tail), so neither ever reaches the file by its name again.
 */
export function createRunLog(logDir: string, name: string, setting: string): number {
  const dirFd = openLogDir(logDir, setting);
  try {
    return createLogIn(dirFd, logDir, name);
  } finally {
    fs.closeSync(dirFd);
  }
}

/**
 * Opens the log folder and checks it on its descriptor (ours, no link, nobody else writes), making it
 * again if a tmp cleaner removed it. The caller closes the descriptor.
 */
export function openLogDir(logDir: string, setting: string): number {
  let dirFd: number;
  try {
    dirFd = fs.openSync(logDir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw unsafeLogDir(logDir, setting, err);
    // A tmp cleaner removed it: made again, and checked.
    ensureLogDir(logDir, setting);
    dirFd = fs.openSync(logDir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  const problem = dirProblem(fs.fstatSync(dirFd), privatePolicy());
  if (problem) {
    fs.closeSync(dirFd);
    throw new UnsafeStationError(
      'lock-dir-unsafe',
      `${setting}: log folder ${logDir} ${problem.what}; this is unsafe: ${LOG_DIR_WHY}. Fix: ${problem.fix(logDir)}`,
    );
  }
  return dirFd;
}

/** Creates the log `name` in the checked log folder `dirFd` (see createRunLog). */
export function createLogIn(dirFd: number, logDir: string, name: string): number {
  try {
    const fd = fs.openSync(
      `/proc/self/fd/${dirFd}/${name}`,
      O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
      0o600,
    );
    // The umask may have narrowed the mode; nothing else may widen it.
    fs.fchmodSync(fd, 0o600);
    return fd;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST')
      throw new UnsafeStationError(
        'lock-file-unsafe',
        `run log ${path.join(logDir, name)} exists before its run started (planted, or a link); it is refused, not written. Fix: rm -f -- '${path.join(logDir, name)}' and look at who made it`,
      );
    throw err;
  }
}

/**
 * Opens an existing run log (a run adopted from an earlier agent, or an ended run's log to read)
 * without following a link or blocking on a FIFO, and checks it on the descriptor: a regular file
 * with one link, ours. Null when it is gone; anything else throws.
 */
export function openRunLog(logPath: string, write: boolean): number | null {
  return openLogAt(logPath, logPath, write, false);
}

/**
 * The agent's own descriptor (cap and tail) on the log a run's waiter made in the checked log folder
 * `dirFd` (SpawnOptions.logToMake), opened through that descriptor and checked like openRunLog, and
 * 0600 as the waiter made it (an older log may be wider and is still read; this one is new): the
 * folder is the agent's alone, so the file there is the one the waiter made. Null when it is gone.
 */
export function openMadeLog(dirFd: number, logDir: string, name: string): number | null {
  return openLogAt(`/proc/self/fd/${dirFd}/${name}`, path.join(logDir, name), true, true);
}

function openLogAt(openPath: string, logPath: string, write: boolean, private600: boolean): number | null {
  let fd: number;
  try {
    fd = fs.openSync(openPath, (write ? O_RDWR | O_APPEND : O_RDONLY) | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return null;
    if (code === 'ELOOP') throw new UnsafeStationError('lock-file-unsafe', `run log ${logPath} is a symbolic link; it is not followed`);
    throw err;
  }
  const st = fs.fstatSync(fd);
  const uid = process.getuid?.() ?? 0;
  if (!st.isFile() || st.nlink !== 1 || st.uid !== uid) {
    fs.closeSync(fd);
    throw new UnsafeStationError(
      'lock-file-unsafe',
      `run log ${logPath} is not a regular file of yours with one link (uid ${st.uid}, ${st.nlink} links); it is not used`,
    );
  }
  if (private600 && (st.mode & 0o777) !== 0o600) {
    fs.closeSync(fd);
    throw new UnsafeStationError(
      'lock-file-unsafe',
      `run log ${logPath} has mode ${(st.mode & 0o777).toString(8)}, not the 0600 it was made with; it is not used`,
    );
  }
  return fd;
}

function unsafeLogDir(logDir: string, setting: string, err: unknown): Error {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ELOOP' || code === 'ENOTDIR')
    return new UnsafeStationError(
      'lock-dir-unsafe',
      `${setting}: log folder ${logDir} is not a real folder (${code}); another account may have replaced it. Fix: remove it (rm -- '${logDir}') and start again`,
    );
  return err instanceof Error ? err : new Error(String(err));
}
