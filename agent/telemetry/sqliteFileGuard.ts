import * as fs from 'node:fs';

/** A file beside our SQLite data that is not ours or not a plain file: never opened by SQLite. */
export class UnsafeFileError extends Error {
  readonly code = 'EUNSAFEFILE';
}

const { O_RDWR, O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK } = fs.constants;

/** The companions SQLite opens by name next to a database file. */
export const SQLITE_COMPANIONS = ['-wal', '-shm', '-journal'] as const;

/**
 * Checks the database file and its companions before SQLite opens them by name: each must be a
 * regular file (not a link, not a FIFO that would hang us), owned by us, with one link; a file of ours
 * readable by others is narrowed to 0600. A missing database is created 0600 with O_EXCL | O_NOFOLLOW
 * (SQLite gives the -wal and -shm the database's mode).
 *
 * Why lstat and not open + fstat for files that exist: closing any descriptor of a file drops every
 * POSIX lock this process holds on it, so opening a database that SQLite already has open here (a
 * second connection, a reopen) would silently release SQLite's locks and let another process
 * checkpoint or truncate under it. The folder is verified private (or is the user's own home), so no
 * other user can swap a file between this check and SQLite's open.
 */
export function guardSqliteFiles(file: string): void {
  createIfMissing(file);
  for (const name of [file, ...SQLITE_COMPANIONS.map((suffix) => file + suffix)]) checkOwnPath(name);
}

/** Same checks, for after SQLite has created its -wal and -shm. */
export function tightenSqliteFiles(file: string): void {
  for (const name of [file, ...SQLITE_COMPANIONS.map((suffix) => file + suffix)]) checkOwnPath(name);
}

function createIfMissing(file: string): void {
  if (fs.lstatSync(file, { throwIfNoEntry: false }) !== undefined) return;
  let fd: number;
  try {
    fd = fs.openSync(file, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK, 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return; // made meanwhile: checked below
    throw err;
  }
  try {
    checkOwnFile(fd, file);
  } finally {
    fs.closeSync(fd);
  }
}

function checkOwnPath(file: string): void {
  const st = fs.lstatSync(file, { throwIfNoEntry: false });
  if (st === undefined) return;
  if (st.isSymbolicLink())
    throw new UnsafeFileError(`${file} is a symbolic link: refused (it could point at a file of ours elsewhere); remove it`);
  checkStat(st, file);
  if ((st.mode & 0o077) === 0) return;
  try {
    fs.chmodSync(file, st.mode & 0o700);
  } catch (err) {
    // SQLite removes the -wal and -shm when its last connection to the file closes (another process's,
    // a CLI's): gone since the lstat, there is nothing left to narrow.
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}

function checkStat(st: fs.Stats, file: string): void {
  const uid = process.getuid?.() ?? st.uid;
  if (!st.isFile()) throw new UnsafeFileError(`${file} is not a regular file: refused; remove it`);
  if (st.uid !== uid)
    throw new UnsafeFileError(
      `${file} is owned by uid ${st.uid}, not by us (uid ${uid}): refused, its owner could read our data; remove it`,
    );
  if (st.nlink !== 1) throw new UnsafeFileError(`${file} has ${st.nlink} hard links: refused (another name could expose it); remove it`);
}

/** Device and inode of what `file` names now (no link followed); null when nothing is there. */
export function identityOf(file: string): string | null {
  const st = fs.lstatSync(file, { throwIfNoEntry: false });
  return st === undefined ? null : `${st.dev}:${st.ino}`;
}

/**
 * fstat on the open descriptor: a regular file, owned by us, one link; a mode wider than 0600 is
 * narrowed (a file of ours that others could read). Throws UnsafeFileError otherwise.
 */
export function checkOwnFile(fd: number, file: string): void {
  const st = fs.fstatSync(fd);
  checkStat(st, file);
  if ((st.mode & 0o077) !== 0) fs.fchmodSync(fd, st.mode & 0o700);
}
