import * as fs from 'node:fs';
import * as path from 'node:path';
import { dirMode, type StationPolicy } from './stationPolicy';
import { UnsafeStationError } from './unsafeStationError';

const STICKY = 0o1000;
const WHY =
  'another account could replace the slot files with links to your files, forge owner records that make the agent signal processes, or block every slot';

/**
 * The one way to use a shared folder (the lock folder, each pool folder): made 0700 (2770 with a lock
 * group) if missing, then checked with lstat, never through a link: a real folder, ours (or root's
 * with the sticky bit, or the lock group's), writable by nobody else. Its ancestors must be owned by
 * root or us and, where others can write, sticky (as /tmp is): otherwise our folder could be renamed
 * away and replaced. Throws UnsafeStationError naming the setting, the danger and the fix.
 */
export function ensureVerifiedDir(dir: string, policy: StationPolicy, setting: string, why = WHY): void {
  checkAncestors(dir, policy, setting, why);
  try {
    fs.mkdirSync(dir, { mode: dirMode(policy) });
    // mkdir's mode passes through the umask, and a group must be given to the folder explicitly.
    if (policy.group) fs.chownSync(dir, policy.uid, policy.group.gid);
    fs.chmodSync(dir, dirMode(policy));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  const problem = dirProblem(fs.lstatSync(dir), policy);
  if (problem) throw unsafeDir(setting, dir, problem.what, problem.fix(dir), why);
}

interface Problem {
  what: string;
  fix(dir: string): string;
}

/** What is wrong with a folder we are to keep slot files in, or null when it is safe. */
export function dirProblem(st: fs.Stats, policy: StationPolicy): Problem | null {
  const q = (p: string) => `'${p.replace(/'/g, "'\\''")}'`;
  if (st.isSymbolicLink())
    return {
      what: 'is a symbolic link',
      fix: (d) => `rm -- ${q(d)} (as its owner, uid ${st.uid}, or root), or set the setting to a folder of your own`,
    };
  if (!st.isDirectory()) return { what: 'is not a directory', fix: (d) => `rm -- ${q(d)} (as its owner, uid ${st.uid}, or root)` };
  const groupOk = policy.group !== null && st.gid === policy.group.gid;
  const ownerOk = st.uid === policy.uid || (st.uid === 0 && (st.mode & STICKY) !== 0) || groupOk;
  if (!ownerOk) {
    return {
      what: `is owned by uid ${st.uid}, not by you (uid ${policy.uid})${policy.group ? ` nor shared with group ${policy.group.name}` : ''}`,
      fix: (d) => `sudo rm -rf -- ${q(d)} after checking what is in it, or set the setting to a folder of your own`,
    };
  }
  if ((st.mode & 0o002) !== 0 || ((st.mode & 0o020) !== 0 && !groupOk)) {
    const fix = policy.group ? `chgrp ${policy.group.name} -- ${q('%')} && chmod 2770 -- ${q('%')}` : `chmod 700 -- ${q('%')}`;
    return {
      what: `is writable by ${(st.mode & 0o002) !== 0 ? 'every account' : `group ${st.gid}`} (mode ${(st.mode & 0o7777).toString(8)})`,
      fix: (d) => fix.split(q('%')).join(q(d)),
    };
  }
  return null;
}

/**
 * Whether `now` (an lstat of a folder's path) shows the very folder checked as `was`, with the owner,
 * group and mode it was checked with: then the check still holds (dirProblem reads nothing else) and
 * a descriptor held on it may be used again without opening the path again.
 */
function sameCheckedFolder(now: fs.Stats | undefined, was: fs.Stats): boolean {
  return (
    now !== undefined && now.dev === was.dev && now.ino === was.ino && now.mode === was.mode && now.uid === was.uid && now.gid === was.gid
  );
}

/**
 * One lstat of `dir`: its stat when the path still names the folder checked as `was` (sameCheckedFolder),
 * else null (gone, replaced, changed, or unreadable): the caller then opens and checks the path again.
 */
export function stillCheckedFolder(dir: string, was: fs.Stats): fs.Stats | null {
  let now: fs.Stats | undefined;
  try {
    now = fs.lstatSync(dir, { throwIfNoEntry: false });
  } catch {
    return null;
  }
  return sameCheckedFolder(now, was) ? now! : null;
}

function checkAncestors(dir: string, policy: StationPolicy, setting: string, why: string): void {
  // Missing parents are made ours; an existing one is judged below, whoever made it. Errors such as
  // ENOTDIR are thrown as they are: the caller names the setting.
  try {
    fs.mkdirSync(path.dirname(dir), { recursive: true, mode: 0o755 });
  } catch (err) {
    // mkdir -p says EEXIST when a file stands where a folder must be: that is ENOTDIR to the user.
    if ((err as NodeJS.ErrnoException).code === 'EEXIST')
      throw Object.assign(new Error(`not a directory on the way to ${dir}`), { code: 'ENOTDIR' });
    throw err;
  }
  // A link on the way is a pointer whoever owns it can turn: only root's or ours are followed.
  for (let p = path.dirname(dir); p !== path.dirname(p); p = path.dirname(p)) {
    const st = fs.lstatSync(p);
    if (st.isSymbolicLink() && st.uid !== 0 && st.uid !== policy.uid) {
      throw unsafeDir(
        setting,
        dir,
        `lies under ${p}, a symbolic link of uid ${st.uid}`,
        'set the setting to a path without links of other accounts',
        why,
      );
    }
  }
  const real = fs.realpathSync(path.dirname(dir));
  for (let p = real; ; p = path.dirname(p)) {
    const st = fs.lstatSync(p);
    const groupOk = policy.group !== null && st.gid === policy.group.gid;
    const ownerOk = st.uid === 0 || st.uid === policy.uid || groupOk;
    const othersWrite = (st.mode & 0o002) !== 0 || ((st.mode & 0o020) !== 0 && !groupOk);
    if (!st.isDirectory() || !ownerOk || (othersWrite && (st.mode & STICKY) === 0)) {
      throw unsafeDir(
        setting,
        dir,
        `lies inside ${p} (owner uid ${st.uid}, mode ${(st.mode & 0o7777).toString(8)}), where another account can rename or replace it`,
        `choose a folder whose parents are owned by root or by you and are not writable by others (or are sticky, like /tmp)`,
        why,
      );
    }
    if (p === path.dirname(p)) break;
  }
}

function unsafeDir(setting: string, dir: string, what: string, fix: string, why: string): UnsafeStationError {
  return new UnsafeStationError('lock-dir-unsafe', `${setting}: ${dir} ${what}; this is unsafe: ${why}. Fix: ${fix}`);
}
