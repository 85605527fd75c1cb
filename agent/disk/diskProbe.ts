import * as fs from 'node:fs';

/** Free and total bytes of the filesystem holding `path`; rejects when it cannot be measured. */
export type DiskProbe = (path: string) => Promise<{ freeBytes: number; totalBytes: number }>;

/**
 * The default probe: one statfs(2) system call through Node's `fs.promises.statfs`.
 *
 * Why not `check-disk-space` (the design card's suggestion): on Linux it spawns `df -Pk` for every
 * check and parses its text. That is a process per check (every 15 s, for as long as a run waits),
 * and the parsing breaks on some `df` output — a mount point with spaces or a long device name that
 * `df` wraps onto a second line (its issue #32) — so the gate could read a wrong number. statfs asks
 * the kernel directly: no process, no parsing, and errors arrive as errno codes (ENOENT, EACCES, EIO)
 * that the gate can show as they are.
 *
 * `bavail` (blocks available to unprivileged users) rather than `bfree`: it is what `df` reports as
 * "Avail" and what a fetcher not running as root can really still write.
 */
export const statfsProbe: DiskProbe = async (path) => {
  const s = await fs.promises.statfs(path);
  return { freeBytes: s.bavail * s.bsize, totalBytes: s.blocks * s.bsize };
};
