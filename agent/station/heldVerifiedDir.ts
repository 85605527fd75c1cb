import type { VerifiedDir } from './openInVerifiedDir';

/**
 * A checked folder kept open between uses (a pool's folder is used at every grant). Each use costs one
 * lstat of the path, not an open, an fstat and a close: the descriptor held is used again while the path
 * still names that very folder with the owner and mode it was checked with; otherwise it is closed and
 * the path opened and checked again by `open` (which makes the folder again if a tmp cleaner removed it).
 */
export class HeldVerifiedDir {
  private held: VerifiedDir | null = null;

  constructor(private readonly open: () => VerifiedDir) {}

  get(): VerifiedDir {
    if (this.held?.stillThere()) return this.held;
    this.close();
    this.held = this.open();
    return this.held;
  }

  close(): void {
    this.held?.close();
    this.held = null;
  }
}
