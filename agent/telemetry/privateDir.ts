import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

/** A folder that should be ours alone and is not: refused, with what is wrong and how to fix it. */
export class UnsafeFolderError extends Error {
  readonly code = 'EUNSAFEDIR';
}

const uid = (): number => process.getuid?.() ?? -1;

/**
 * Where the fallback spool lives: `$XDG_RUNTIME_DIR/quantilica/` when that variable names a folder
 * that is ours (systemd makes it 0700 per user), else `/tmp/quantilica-<uid>/`. Never `/tmp` itself:
 * another user could plant the files there first and read the events, forge runs or hang us on a FIFO.
 */
export function fallbackSpoolDir(env: NodeJS.ProcessEnv = process.env): string {
  const runtime = env.XDG_RUNTIME_DIR;
  if (runtime !== undefined && path.isAbsolute(runtime) && isOwnPrivateFolder(runtime)) return path.join(runtime, 'quantilica');
  return path.join(os.tmpdir(), `quantilica-${uid()}`);
}

export function defaultFallbackSpool(env: NodeJS.ProcessEnv = process.env): string {
  return path.join(fallbackSpoolDir(env), 'quantilica_telemetry_spool.db');
}

function isOwnPrivateFolder(dir: string): boolean {
  try {
    const st = fs.lstatSync(dir);
    return st.isDirectory() && st.uid === uid() && (st.mode & 0o022) === 0;
  } catch {
    return false;
  }
}

/**
 * Creates `dir` 0700 when missing (its parent must exist: a shared parent such as /tmp is never made
 * by us), then verifies with lstat that it is a real folder (not a link), owned by this user, mode 0700.
 * Anything else is refused: we never chmod or chown a folder someone else made or could have swapped.
 */
export function ensurePrivateDir(dir: string): void {
  try {
    fs.mkdirSync(dir, { mode: 0o700 });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    else if (code !== 'EEXIST') throw err;
  }
  const st = fs.lstatSync(dir);
  const fix = `remove it (rm -rf ${dir}) or set XDG_RUNTIME_DIR to a folder of your own, then try again`;
  if (st.isSymbolicLink() || !st.isDirectory()) {
    throw new UnsafeFolderError(
      `private folder ${dir} is not a real folder (a ${st.isSymbolicLink() ? 'symbolic link' : 'file'}): refused, it could send our files elsewhere; ${fix}`,
    );
  }
  if (st.uid !== uid()) {
    throw new UnsafeFolderError(
      `private folder ${dir} is owned by uid ${st.uid}, not by us (uid ${uid()}): refused, its owner could read or forge our telemetry; ${fix}`,
    );
  }
  if ((st.mode & 0o777) !== 0o700) {
    throw new UnsafeFolderError(
      `private folder ${dir} has mode ${(st.mode & 0o777).toString(8)}, not 700: refused, other users could enter it; chmod 700 ${dir}`,
    );
  }
}
