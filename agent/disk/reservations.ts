import * as path from 'node:path';
import type { Logger } from '../log/logger';
import { dirUsage } from './dirUsage';

interface Reservation {
  fetcher: string;
  expectedBytes: number;
  /** Usage of the fetcher's data dir when it started; null until started and measured. */
  baseline: number | null;
}

/**
 * The expected download sizes of admitted runs that are not yet on disk. Free space already
 * counts what a running fetcher has written, so only the rest of its declared size is still to
 * come: declared size minus the growth of DATA_DIR/<fetcher> since it started. Without a
 * measurement (not started yet, dir unreadable) the whole declared size counts, which errs on the
 * side of not filling the disk.
 */
export class Reservations {
  private readonly byRun = new Map<string, Reservation>();

  constructor(
    private readonly dataDir: string,
    private readonly logger: Logger,
  ) {}

  /** Reserve at admission: a run admitted but still waiting for a pool slot will write soon. */
  add(runId: string, fetcher: string, expectedBytes: number | null): void {
    if (expectedBytes === null || expectedBytes <= 0 || this.byRun.has(runId)) return;
    this.byRun.set(runId, { fetcher, expectedBytes, baseline: null });
  }

  /** The run's process started: its data dir grows from now on. */
  started(runId: string, fetcher: string, expectedBytes: number | null): void {
    this.add(runId, fetcher, expectedBytes);
    const r = this.byRun.get(runId);
    if (!r) return;
    dirUsage(this.dirOf(fetcher)).then(
      (bytes) => {
        r.baseline = bytes;
      },
      (err: unknown) => {
        this.logger.warn({ fetcher, err: String(err) }, 'disk gate: cannot measure the data dir; counting the whole expected size');
      },
    );
  }

  end(runId: string): void {
    this.byRun.delete(runId);
  }

  size(): number {
    return this.byRun.size;
  }

  /** Bytes still to be written by admitted runs, measured now. */
  async outstandingBytes(): Promise<number> {
    let total = 0;
    for (const r of this.byRun.values()) {
      let grown = 0;
      if (r.baseline !== null) {
        try {
          // Growth can be negative when an ingest daemon removes uploaded files; that frees space
          // that free space already shows, so it must not lower the reservation below zero growth.
          grown = Math.max(0, (await dirUsage(this.dirOf(r.fetcher))) - r.baseline);
        } catch {
          grown = 0;
        }
      }
      total += Math.max(0, r.expectedBytes - grown);
    }
    return total;
  }

  private dirOf(fetcher: string): string {
    return path.join(this.dataDir, fetcher);
  }
}
