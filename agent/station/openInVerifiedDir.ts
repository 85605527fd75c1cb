import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { dirProblem, stillCheckedFolder } from './verifiedDir';
import { fileMode, type StationPolicy } from './stationPolicy';
import { UnsafeStationError } from './unsafeStationError';

/** Linux's O_CLOEXEC (Node does not export it; libuv sets it anyway: this says so at the call). */
const O_CLOEXEC = 0o2000000;
const { O_RDONLY, O_RDWR, O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK, O_DIRECTORY } = fs.constants;

/** The largest owner record read from a lock file: a record is one short JSON line. */
export const RECORD_CAP = 4096;

/** Told when a file of ours was tightened to 0600 (its old mode): the caller logs it. */
export type OnTightened = (file: string, oldMode: number) => void;

/** What the log says of a slot file of ours tightened to 0600 (once: it stays 0600). */
export function tightenedMessage(file: string, mode: number): string {
  return `lock file ${file} had mode ${mode.toString(8)} (made with a shell's umask, e.g. by a legacy flock script of this account); it lies in a lock folder only you can enter, so it was tightened to 600 and used`;
}

/**
 * A folder opened once and checked on its descriptor: names inside are reached through
 * /proc/self/fd/<fd>/, which is openat(2) for Node, so a folder swapped after the check is not used.
 */
export class VerifiedDir {
  private constructor(
    readonly dir: string,
    private readonly fd: number,
    private current: fs.Stats,
    private readonly policy: StationPolicy,
    private readonly privateDir: boolean,
    private readonly onTightened: OnTightened,
  ) {}

  /** The folder as checked when it was opened (its fstat), or as seen by the last `stillThere`. */
  get stat(): fs.Stats {
    return this.current;
  }

  /**
   * Whether the path still names this very folder, unchanged in owner and mode (one lstat): then
   * the folder may be used again as it is, and `stat` is that lstat (its times as of now). False
   * when it is gone, replaced or changed: the caller closes it and opens the path again.
   */
  stillThere(): boolean {
    const now = stillCheckedFolder(this.dir, this.current);
    if (now === null) return false;
    this.current = now;
    return true;
  }

  /**
   * Opens and checks the folder; null when it does not exist (a tmp cleaner removed it).
   * `onTightened` hears of each file of ours found too open and tightened (see openFile).
   */
  static open(dir: string, policy: StationPolicy, onTightened: OnTightened = () => {}): VerifiedDir | null {
    let fd: number;
    try {
      fd = fs.openSync(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return null;
      if (code === 'ELOOP' || code === 'ENOTDIR')
        throw new UnsafeStationError(
          'lock-dir-unsafe',
          `${dir} is not a real folder (${code}); another account may have replaced it. Fix: remove it (rm -- '${dir}') and start again`,
        );
      throw err;
    }
    const st = fs.fstatSync(fd);
    const problem = dirProblem(st, policy);
    if (problem) {
      fs.closeSync(fd);
      throw new UnsafeStationError(
        'lock-dir-unsafe',
        `${dir} ${problem.what}; this is unsafe: another account could plant links or forged records there. Fix: ${problem.fix(dir)}`,
      );
    }
    // Nobody but us can enter a folder of ours with mode 0700 (no lock group): a file inside is
    // reachable by this account alone, whatever its own mode says.
    const privateDir = policy.group === null && st.uid === policy.uid && (st.mode & 0o077) === 0;
    return new VerifiedDir(dir, fd, st, policy, privateDir, onTightened);
  }

  close(): void {
    fs.closeSync(this.fd);
  }

  /** The path that reaches `name` inside this very folder. */
  private inside(name: string): string {
    return `/proc/self/fd/${this.fd}/${name}`;
  }

  /**
   * Opens a file in the folder, never through a link, never blocking on a FIFO, and checks it on the
   * descriptor: a regular file with one link, ours (or the lock group's), private. `create` makes it
   * (0600, 0660 with a group) when missing; without it a missing file is null. A file that fails the
   * check throws UnsafeStationError with the command that fixes it; other errors (EMFILE…) are thrown.
   */
  openFile(name: string, opts: { create: boolean; write: boolean }): { fd: number; st: fs.Stats } | null {
    const base = (opts.write ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
    const target = this.inside(name);
    let fd: number | null = null;
    let created = false;
    try {
      // The file that is there first (a slot file exists from its first run on), so the common case
      // costs one open and no thrown error; made only when absent, and opened again if another
      // process made it in between.
      try {
        fd = fs.openSync(target, base);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || !opts.create) throw err;
      }
      if (fd === null) {
        try {
          fd = fs.openSync(target, base | O_CREAT | O_EXCL, fileMode(this.policy));
          created = true;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
        }
      }
      fd ??= fs.openSync(target, base);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' && !opts.create) return null;
      if (code === 'ELOOP') throw this.unsafeFile(name, 'is a symbolic link', `rm -f -- '${this.pathOf(name)}'`);
      if (code === 'EISDIR' || code === 'ENXIO' || code === 'ENOTDIR')
        throw this.unsafeFile(name, `is not a regular file (${code})`, `rm -rf -- '${this.pathOf(name)}'`);
      throw err;
    }
    try {
      if (created) {
        // The umask may have narrowed the mode, and a shared pool's files belong to its group.
        if (this.policy.group) fs.fchownSync(fd, this.policy.uid, this.policy.group.gid);
        fs.fchmodSync(fd, fileMode(this.policy));
      }
      let st = fs.fstatSync(fd);
      if (!created && this.tightenable(st)) {
        // A file of ours made with the shell's umask (a legacy `flock 9>slot_0.lock`, 0644) in a
        // folder only we can enter: nobody else could have opened it, so it is made private on
        // this very descriptor and used, where refusing it failed every run beside the script.
        fs.fchmodSync(fd, 0o600);
        this.onTightened(this.pathOf(name), st.mode & 0o7777);
        st = fs.fstatSync(fd);
      }
      const problem = this.fileProblem(st);
      if (problem) throw this.unsafeFile(name, problem.what, problem.fix);
      return { fd, st };
    } catch (err) {
      fs.closeSync(fd);
      throw err;
    }
  }

  /** lstat of a name in this folder (null when absent): to see whether a held file is still the one there. */
  lstat(name: string): fs.Stats | null {
    try {
      return fs.lstatSync(this.inside(name), { throwIfNoEntry: false }) ?? null;
    } catch {
      return null;
    }
  }

  names(): string[] {
    return fs.readdirSync(this.inside('.'));
  }

  /**
   * Creates a file no one can predict and removes it: proves the folder takes a write (access() says
   * yes to root everywhere) without ever touching an existing file.
   */
  probeWrite(): void {
    const name = `.quantilica-probe-${randomBytes(16).toString('hex')}`;
    const fd = fs.openSync(this.inside(name), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600);
    fs.closeSync(fd);
    fs.unlinkSync(this.inside(name));
  }

  pathOf(name: string): string {
    return path.join(this.dir, name);
  }

  /** Ours, one link, a regular file, too open, in a private folder: safe to tighten rather than refuse. */
  private tightenable(st: fs.Stats): boolean {
    return this.privateDir && st.isFile() && st.nlink === 1 && st.uid === this.policy.uid && (st.mode & 0o077) !== 0;
  }

  private fileProblem(st: fs.Stats): { what: string; fix: string } | null {
    if (!st.isFile()) return { what: 'is not a regular file (a FIFO, device or socket would block or fool the agent)', fix: 'rm -f -- %' };
    if (st.nlink !== 1) return { what: `has ${st.nlink} hard links (it may be another file of yours)`, fix: 'rm -f -- %' };
    const groupOk = this.policy.group !== null && st.gid === this.policy.group.gid;
    if (st.uid !== this.policy.uid && !groupOk)
      return { what: `is owned by uid ${st.uid}, not by you (uid ${this.policy.uid})`, fix: 'rm -f -- % (as root if needed)' };
    const open = st.mode & (groupOk ? 0o007 : 0o077);
    if (open !== 0)
      return {
        what: `has mode ${(st.mode & 0o7777).toString(8)}: other accounts can open it and hold its lock`,
        fix: `chmod ${groupOk ? '660' : '600'} -- %`,
      };
    return null;
  }

  private unsafeFile(name: string, what: string, fix: string): UnsafeStationError {
    const file = `'${this.pathOf(name).replace(/'/g, "'\\''")}'`;
    return new UnsafeStationError(
      'lock-file-unsafe',
      `lock file ${this.pathOf(name)} ${what}; it is refused, not used: another account could make the agent write your files through it, block a slot or forge its owner. Fix: ${fix.split('%').join(file)}`,
    );
  }
}

/** Reads at most `cap` bytes from the start of an open file (a record, never an unbounded read). */
export function readCapped(fd: number, cap = RECORD_CAP): string {
  const buf = Buffer.alloc(cap);
  const n = fs.readSync(fd, buf, 0, cap, 0);
  return buf.subarray(0, n).toString('utf8');
}
