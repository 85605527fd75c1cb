import type { VerifiedDir } from '../station/openInVerifiedDir';

/**
 * How long after a folder's last change its listing may be kept. A name added within the same tick of
 * the kernel's file clock as the listing would leave the folder's times as they were; a second is far
 * beyond that tick, so a later change always shows as a new mtime or ctime.
 */
export const SETTLED_MS = 1000;

/**
 * A folder's names, listed again only when the folder changed since (its dev, inode, mtime or ctime
 * differ from the listing's): a pool's lock folder does not change while slots are taken and given
 * back, and it was listed at every try for a slot. A folder changed less than SETTLED_MS before the
 * listing is not kept.
 */
export class DirNames {
  private kept: { dev: number; ino: number; mtimeMs: number; ctimeMs: number; names: readonly string[] } | null = null;

  of(dir: Pick<VerifiedDir, 'stat' | 'names'>, now = Date.now()): readonly string[] {
    const { dev, ino, mtimeMs, ctimeMs } = dir.stat;
    const k = this.kept;
    if (k !== null && k.dev === dev && k.ino === ino && k.mtimeMs === mtimeMs && k.ctimeMs === ctimeMs) return k.names;
    // Listed after the stat: a change in between is in the names and shows as new times next time.
    const names = dir.names();
    this.kept = now - Math.max(mtimeMs, ctimeMs) > SETTLED_MS ? { dev, ino, mtimeMs, ctimeMs, names } : null;
    return names;
  }
}
