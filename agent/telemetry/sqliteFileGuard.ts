import * as fs from 'node:fs';

/** A file beside our SQLite data that is not ours or not a plain file: never opened by SQLite. */
export class UnsafeFileError extends Error {
  readonly code = 'EUNSAFEFILE';
}

const { O_RDONLY, O_RDWR, O_CREAT, O_NOFOLLOW, O_NONBLOCK } = fs.constants;
const HEADER_BYTES = 16;

/** The companions SQLite opens by name next to a database file. */
export const SQLITE_COMPANIONS = ['-wal', '-shm', '-journal'] as const;

/**
 * Checks the database file and its companions before SQLite opens them by name: each is opened with
 * O_NOFOLLOW | O_NONBLOCK (a symlink fails, a FIFO cannot block us) and checked with fstat on that
 * descriptor: a regular file, owned by us, one link. The database is created 0600 when missing, and a
 * file of ours that is readable by others is narrowed to 0600 (SQLite gives the -wal and -shm the
 * database's mode). Returns the first bytes of the database (its header), read from that descriptor.
 */
export function guardSqliteFiles(file: string): Buffer {
  const head = guardOne(file, true);
  for (const suffix of SQLITE_COMPANIONS) guardOne(file + suffix, false);
  return head ?? Buffer.alloc(0);
}

/** Narrows the files that exist (after SQLite created its -wal/-shm) to 0600; checks them as above. */
export function tightenSqliteFiles(file: string): void {
  guardOne(file, false);
  for (const suffix of SQLITE_COMPANIONS) guardOne(file + suffix, false);
}

function guardOne(file: string, create: boolean): Buffer | null {
  let fd: number;
  try {
    fd = fs.openSync(file, (create ? O_RDWR | O_CREAT : O_RDONLY) | O_NOFOLLOW | O_NONBLOCK, 0o600);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' && !create) return null;
    if (code === 'ELOOP') throw new UnsafeFileError(`${file} is a symbolic link: refused (it could point at a file of ours elsewhere); remove it`);
    throw err;
  }
  try {
    checkOwnFile(fd, file);
    if (!create) return null;
    const head = Buffer.alloc(HEADER_BYTES);
    const read = fs.readSync(fd, head, 0, HEADER_BYTES, 0);
    return head.subarray(0, read);
  } finally {
    fs.closeSync(fd);
  }
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
  const uid = process.getuid?.() ?? st.uid;
  if (!st.isFile()) throw new UnsafeFileError(`${file} is not a regular file: refused; remove it`);
  if (st.uid !== uid) throw new UnsafeFileError(`${file} is owned by uid ${st.uid}, not by us (uid ${uid}): refused, its owner could read our data; remove it`);
  if (st.nlink !== 1) throw new UnsafeFileError(`${file} has ${st.nlink} hard links: refused (another name could expose it); remove it`);
  if ((st.mode & 0o077) !== 0) fs.fchmodSync(fd, st.mode & 0o700);
}
